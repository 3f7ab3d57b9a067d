"""A verifiers v1 env that judges sibling attempts against each other (v1's group reward): each episode runs
two attempts at the task, and ``finalize`` rewards the attempts that agree with their sibling."""

import asyncio

import verifiers.v1 as vf


class EchoData(vf.TaskData):
    answer: str = ""


class EchoTask(vf.Task[EchoData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(self.data.answer in trace.last_reply)


class EchoTaskset(vf.Taskset[EchoTask, vf.TasksetConfig]):
    def load(self) -> list[EchoTask]:
        return [EchoTask(EchoData(prompt=f"Say {w}.", answer=w), self.config.task) for w in ("red", "blue")]


class PairConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"})
    attempts: int = 2


class PairEnv(vf.Env[PairConfig]):
    async def run(self, task, agents):
        for _ in range(self.config.attempts):
            await agents.agent.run(task)

    async def finalize(self, task, episode):
        replies = [t.last_reply.strip() for t in episode.traces]
        for trace in episode.traces:
            same = sum(1 for r in replies if r == trace.last_reply.strip()) - 1
            trace.record_reward("agree", same / max(1, len(replies) - 1), weight=0.5)
            trace.record_metric("siblings", float(len(replies) - 1))
        await asyncio.sleep(0)


__all__ = ["EchoTaskset", "PairEnv"]
