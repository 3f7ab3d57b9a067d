"""What lets ``workbench optimize`` outlive its process: runs a killed optimisation left ``running`` are
marked interrupted at the next start, and ``optimize --resume ID`` continues one from what it stored.

An optimisation holds the lock of its run (``workbench.store.run_lock``) while it runs, as each of its
evaluations holds its own; the kernel drops a lock when its holder dies, however it dies. So a run of an
optimisation that is ``running`` with nobody holding its lock was abandoned (kill -9, a crash, the
machine going down). GEPA keeps its own search state in a folder beside the store (``run_dir``), which
it reads back when it starts there again; the search's record (candidates, spend) is in the run's summary.
"""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path
from typing import Any

from workbench.errors import ConfigError
from workbench.store import Store
from workbench.store.run_lock import RunLockedError, run_lock
from workbench.store.run_lookups import latest_stage_run, running_runs_of

KIND = "optimize"
_PIPELINE_ID = re.compile(r"opt-[0-9a-f]{8}")
#: The options an optimisation was started with, as given (registered names, not what they resolved to),
#: so that a resumed one resolves them again.
OPTION_FIELDS = ("env", "model", "reflection_model", "env_args", "base_url", "reflection_base_url", "budget_usd",
                 "max_evals", "n", "heldout", "rollouts_per_task", "concurrency", "minibatch", "seed", "apply")


def gepa_dir(store: Store, pipeline_id: str) -> Path:
    """GEPA's state folder of an optimisation: ``<store>.optimize/<id>``, inside the store's own folder."""
    if not _PIPELINE_ID.fullmatch(pipeline_id):
        raise ConfigError(f"{pipeline_id!r} is not an optimisation id (opt- and 8 hex digits)")
    root = store.path.resolve().with_name(store.path.name + ".optimize")
    path = (root / pipeline_id).resolve()
    if path.parent != root.resolve():
        raise ConfigError(f"{pipeline_id!r} is not an optimisation id")
    return path


def forget_search(store: Store, pipeline_id: str) -> None:
    """Remove GEPA's state folder of a finished optimisation (resolved, and inside ``<store>.optimize``)."""
    import shutil

    path = gepa_dir(store, pipeline_id)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)


def mark_abandoned(store: Store) -> list[str]:
    """Mark ``interrupted`` every run of an optimisation (its own run, and its evaluations) that is
    ``running`` while no process holds its lock; the ids marked."""
    marked = []
    for run_id in running_runs_of(store.conn, KIND):
        with contextlib.suppress(RunLockedError), run_lock(store.path, run_id):
            store.update_run(run_id, status="interrupted", finished_at=time.time(),
                             error="its process ended before the run did (killed or crashed)")
            marked.append(run_id)
    return marked


def resumable(store: Store, pipeline_id: str) -> dict[str, Any]:
    """The stored optimisation ``pipeline_id`` if it can be resumed (one clear line if not)."""
    run = store.get_run(pipeline_id)
    if run["kind"] != KIND:
        raise ConfigError(f"run {run['id']} is an {run['kind']} run, not an optimisation; `workbench eval --resume` "
                          "finishes an eval run")
    if run["status"] == "completed":
        raise ConfigError(f"optimisation {run['id']} is already completed; `workbench runs {run['id']}` shows it")
    if not isinstance(run["config"].get("options"), dict):
        raise ConfigError(f"optimisation {run['id']} was made by an older Workbench that did not keep its options; "
                          "start a new one")
    gepa_dir(store, run["id"])  # a well-formed id
    return run


def options_of(run: dict[str, Any]) -> dict[str, Any]:
    """The options ``run`` was started with (see :data:`OPTION_FIELDS`)."""
    stored = run["config"]["options"]
    return {k: stored[k] for k in OPTION_FIELDS if k in stored}


def stage_run(store: Store, pipeline_id: str, stage: str) -> dict[str, Any] | None:
    """The latest evaluation of ``stage`` in the optimisation, if it has one."""
    run_id = latest_stage_run(store.conn, pipeline_id, stage)
    return store.get_run(run_id) if run_id else None


def restore(state: Any, summary: dict[str, Any]) -> None:
    """Put the search's record (candidates, rollouts run, spend) back into a fresh ``SearchState``."""
    from workbench.runs.prompt_search import Candidate

    for c in summary.get("candidates") or []:
        cand = Candidate(int(c["index"]), str(c["prompt"]), list(c.get("runs") or []), int(c.get("rollouts") or 0),
                         float(c.get("mean_reward") or 0.0) * int(c.get("rollouts") or 0), c.get("parent"),
                         c.get("score"))
        state.candidates.append(cand)
    state.evals = int(summary.get("evals") or 0)
    state.spent_usd = float(summary.get("cost_usd") or 0.0)
    state.reflection_calls = int(summary.get("reflection_calls") or 0)
    state.reflection_usd = float(summary.get("reflection_cost_usd") or 0.0)


__all__ = ["OPTION_FIELDS", "forget_search", "gepa_dir", "mark_abandoned", "options_of", "restore", "resumable", "stage_run"]
