"""A multi-turn verifiers v1 env (a ``vf.Env`` of its own): the env keeps a secret number and answers each
guess with "higher" or "lower" until the agent finds it or runs out of guesses."""

import verifiers.v1 as vf


class GuessData(vf.TaskData):
    secret: int = 0


class GuessTask(vf.Task[GuessData]):
    @vf.reward(weight=1.0)
    async def found(self, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == str(self.data.secret))

    @vf.reward(weight=0.25)
    async def quick(self, trace: vf.Trace) -> float:
        return 1.0 / max(1, trace.num_turns)

    @vf.metric
    async def guesses(self, trace: vf.Trace) -> float:
        return float(trace.num_turns)


class GuessTaskset(vf.Taskset[GuessTask, vf.TasksetConfig]):
    def load(self) -> list[GuessTask]:
        return [GuessTask(GuessData(prompt="Guess my number from 1 to 9. Answer with the number only.", secret=s),
                          self.config.task) for s in (5, 3, 8)]


class GuessEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"})
    max_guesses: int = 3


class GuessEnv(vf.Env[GuessEnvConfig]):
    async def run(self, task, agents):
        secret = task.data.secret
        async with agents.agent.interaction(task) as play:
            segment = await play.turn()
            for _ in range(self.config.max_guesses - 1):
                guess = segment.last_reply.strip()
                if segment.terminated or guess == str(secret):
                    break
                hint = "higher" if not guess.isdigit() or int(guess) < secret else "lower"
                segment = await play.turn(hint)


__all__ = ["GuessEnv", "GuessTaskset"]
