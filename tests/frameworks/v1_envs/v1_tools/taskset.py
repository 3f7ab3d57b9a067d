import verifiers.v1 as vf

from v1_tools.server import Calculator


class AddData(vf.TaskData):
    answer: str = ""


class AddConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class AddTask(vf.Task[AddData, vf.State, AddConfig]):
    @classmethod
    def toolsets(cls, config: AddConfig) -> list[vf.Toolset]:
        return [Calculator(config.tools)]

    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(self.data.answer in trace.last_reply)

    @vf.metric
    async def tool_results(self, trace: vf.Trace) -> float:
        return float(len(trace.tool_messages))


class AddTasksetConfig(vf.TasksetConfig):
    task: AddConfig = AddConfig()


class AddTaskset(vf.Taskset[AddTask, AddTasksetConfig]):
    def load(self) -> list[AddTask]:
        pairs = [(2, 3), (1, 1), (4, 4)]
        return [AddTask(AddData(prompt=f"Use the add tool: what is {a} + {b}?", answer=str(a + b)), self.config.task)
                for a, b in pairs]
