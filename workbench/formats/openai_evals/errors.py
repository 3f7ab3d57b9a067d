"""The one error an OpenAI Evals definition can cause: a field that Workbench cannot take, named."""

from __future__ import annotations

from workbench.errors import WorkbenchError


class EvalDefinitionError(WorkbenchError):
    """An eval, run or data file that cannot be imported; the message names the file and the field."""
