"""A verifiers v1 taskset whose tasks offer an MCP tool server (a ``vf.Toolset``): the model adds with a tool."""

from v1_tools.taskset import AddTaskset

__all__ = ["AddTaskset"]
