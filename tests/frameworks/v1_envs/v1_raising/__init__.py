"""A verifiers v1 taskset with a reward that raises on some replies (verifiers then scores none of the
rollout's rewards)."""

import verifiers.v1 as vf


class PickyData(vf.TaskData):
    answer: str = ""


class PickyTask(vf.Task[PickyData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == self.data.answer)

    @vf.reward(weight=0.5)
    async def picky(self, trace: vf.Trace) -> float:
        if "odd" in trace.last_reply:
            raise ValueError("picky cannot score an odd reply")
        return 1.0


class PickyTaskset(vf.Taskset[PickyTask, vf.TasksetConfig]):
    def load(self) -> list[PickyTask]:
        return [PickyTask(PickyData(prompt=f"Say {w}.", answer=w), self.config.task)
                for w in ("even", "odd", "plain", "odd one")]


__all__ = ["PickyTaskset"]
