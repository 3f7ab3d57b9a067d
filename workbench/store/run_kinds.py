"""The kinds of run the store records (``run.kind``), declared below the run code so the store can check them.

:mod:`workbench.runs.kinds` is where the rest of Workbench reads them, with how a face's ``--kind`` is parsed.
"""

from __future__ import annotations

#: Every kind of run, and what makes one.
RUN_KINDS: dict[str, str] = {
    "eval": "an evaluation (`workbench eval`, the app's quick eval, a pipeline's stage)",
    "train": "a training run (`workbench train`, `workbench launch`)",
    "import": "rollouts imported from another tool (`workbench import`)",
    "optimize": "a prompt optimisation (`workbench optimize`)",
    "distill": "a distillation pipeline (`workbench distill`)",
    "probe": "a model-free probe policy (`workbench probe`, the app's P)",
    "validate": "a probe policy or the token check run by `workbench validate`",
    "debug": "a debugger session (`workbench debug`)",
    "play": "a trajectory played by a person (`workbench play`)",
    "gateway": "traffic recorded by the gateway",
}

#: The kinds shown when no kind is asked for: the user's own evaluations, training and imports.
USER_KINDS: tuple[str, ...] = ("eval", "train", "import", "optimize", "distill")

#: The kinds whose runs of one pipeline (``config.pipeline.id``: every policy of one probe) a listing shows as
#: one entry, whose id is the pipeline id.
PIPELINE_KINDS: tuple[str, ...] = ("probe", "validate")


def check_kind(kind: str) -> str:
    """``kind`` when it is one of :data:`RUN_KINDS`; else a ValueError naming the kinds (what the store says
    to a caller that records a run of no known kind)."""
    if kind not in RUN_KINDS:
        raise ValueError(f"run kind {kind!r} is not one of {', '.join(RUN_KINDS)} (workbench.runs.kinds.RUN_KINDS)")
    return kind


__all__ = ["PIPELINE_KINDS", "RUN_KINDS", "USER_KINDS", "check_kind"]
