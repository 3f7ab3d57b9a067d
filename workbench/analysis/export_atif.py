"""Exporting stored rollouts as Harbor ATIF trajectories: ``workbench export --format atif -o FOLDER``.

The folder is laid out as a Harbor job: one trial folder per rollout, named by the rollout's id,
holding ``agent/trajectory.json`` (the conversation as an ATIF trajectory, :data:`WRITTEN_VERSION`)
and, when the rollout has a reward, ``verifier/reward.json`` (Harbor's flat object of named rewards,
``reward`` the total). A system or user message is a step of that source, an assistant message an
agent step with its tool calls, and the tool messages that answer them the results of that step's
observation. Per-step ``metrics`` hold the token counts of the model call behind each assistant
message (when the rollout recorded one call per message) and ``final_metrics`` the rollout's totals.

ATIF cannot say everything a chat message can (a ``developer`` role, a tool call's arguments that are
not a JSON object or are spelled otherwise, a message's extra fields): such a message is kept whole
under ``extra.workbench`` of its step, and the rollout's run, task, reward, named rewards, metrics,
answer and info under ``extra.workbench`` of the trajectory, so ``workbench import --format atif``
reads back exactly what was exported. An export that fails part way leaves nothing: the trials are written into a fresh folder beside the output, renamed into place
when all are written (the output folder must be new or empty).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import orjson

import workbench
from workbench.analysis.export import OUTPUT, rollout_tools
from workbench.errors import ConfigError, OptionError
from workbench.fsutil import staged_folder
from workbench.records.atif import EXTRA, TRAJECTORY, WRITTEN_VERSION, trajectory_steps
from workbench.store.queries import RolloutFilter, get_rollout, page_rollouts

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _usage(r: dict[str, Any]) -> list[dict[str, int]] | None:
    """The token counts of each model call, when the rollout made one per assistant message."""
    calls = r.get("calls") or []
    turns = sum(1 for m in r["messages"] if isinstance(m, dict) and m.get("role") == "assistant")
    if not calls or len(calls) != turns:
        return None
    return [{"prompt_tokens": int(c.get("prompt_tokens") or 0), "completion_tokens": int(c.get("completion_tokens") or 0)}
            for c in calls]


def _object(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def rollout_trajectory(r: dict[str, Any], run: dict[str, Any], tools: list[Any]) -> dict[str, Any]:
    """One stored rollout as an ATIF trajectory."""
    steps = trajectory_steps(r["messages"], _usage(r))
    imported = _object(_object(r.get("state")).get("import"))
    agent = _object(_object(imported.get("metadata")).get("agent")) if imported.get("format") == "atif" else {}
    doc: dict[str, Any] = {
        "schema_version": WRITTEN_VERSION, "session_id": r["id"],
        "agent": {"name": str(agent.get("name") or "workbench"),
                  "version": str(agent.get("version") or workbench.__version__),
                  "model_name": r.get("model") or run.get("model") or "unknown"},
        "steps": steps}
    if defs := [t for t in tools if isinstance(t, dict)]:
        doc["agent"]["tool_definitions"] = defs
    final: dict[str, Any] = {"total_prompt_tokens": int(r.get("prompt_tokens") or 0),
                             "total_completion_tokens": int(r.get("completion_tokens") or 0),
                             "total_steps": len(steps)}
    if r.get("cost_usd"):
        final["total_cost_usd"] = float(r["cost_usd"])
    doc["final_metrics"] = final
    doc["extra"] = {EXTRA: {
        "run_id": r["run_id"], "rollout_id": r["id"], "env": run.get("env_name"), "env_version": run.get("env_version"),
        "task_id": r.get("task_id"), "task_index": r["task_index"], "sample_index": r["sample_index"],
        "status": r.get("status"), "source": r.get("source", "model"), "reward": r.get("reward"),
        "rewards": r.get("rewards") or {}, "metrics": r.get("metrics") or {}, "answer": r.get("answer"),
        "info": r.get("info") or {}, "duration_s": r.get("duration_s") or 0.0}}
    return doc


def reward_file(r: dict[str, Any]) -> dict[str, float] | None:
    """Harbor's ``verifier/reward.json`` of a rollout: ``reward`` the total, then its named rewards."""
    if r.get("reward") is None:
        return None
    return {"reward": r["reward"], **{k: v for k, v in (r.get("rewards") or {}).items() if k != "reward"}}


def check_folder(path: Path) -> Path:
    """``path`` made absolute, refused in one clear line when it cannot be the folder an export fills."""
    out = Path(os.path.abspath(path.expanduser()))
    if out.exists() and not out.is_dir():
        raise OptionError(OUTPUT, path, template="{field} {value} is a file; --format atif writes a folder (one "
                          "trial folder per rollout): give a new or empty folder")
    if out.is_dir() and any(out.iterdir()):
        raise OptionError(OUTPUT, path, template="{field} {value} is not empty; give a new or empty folder")
    if not out.parent.is_dir():
        raise OptionError(OUTPUT, path, template="{field} {value}: the folder {folder} does not exist; create it or "
                          "choose another path", folder=out.parent)
    return out


def _trial_name(rollout_id: str, taken: set[str]) -> str:
    name = _UNSAFE.sub("_", rollout_id).lstrip(".") or "rollout"
    while name in taken:
        name += "_"
    taken.add(name)
    return name


_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS


def _write_trial(trial: Path, doc: dict[str, Any], rewards: dict[str, float] | None) -> None:
    """One rollout's trial folder, inside the export's fresh staging folder (renamed whole into place)."""
    (trial / "agent").mkdir(parents=True)
    (trial / "agent" / TRAJECTORY).write_bytes(orjson.dumps(doc, option=_OPTIONS, default=str))
    if rewards is not None:
        (trial / "verifier").mkdir()
        (trial / "verifier" / "reward.json").write_bytes(orjson.dumps(rewards, option=_OPTIONS))


def export_atif(store: Any, query: RolloutFilter, folder: Path, page: int = 200) -> int:
    """Write one trial folder per rollout ``query`` selects into ``folder``; returns how many. The trials
    are written into a fresh folder beside it, renamed into place when all are written: an export that
    fails part way leaves nothing."""
    out = check_folder(folder)
    conn, n, after = store.conn, 0, None
    runs: dict[str, dict[str, Any]] = {}
    taken: set[str] = set()
    try:
        with staged_folder(out) as staging:  # over a new or empty folder: whole, or not at all
            while True:
                rows = page_rollouts(conn, query, limit=page, after=after)
                for summary in rows:
                    r = get_rollout(conn, summary.pk)
                    if r["run_id"] not in runs:
                        runs[r["run_id"]] = store.get_run(r["run_id"])
                    doc = rollout_trajectory(r, runs[r["run_id"]], rollout_tools(conn, r))
                    _write_trial(staging / _trial_name(r["id"], taken), doc, reward_file(r))
                    n += 1
                if len(rows) < page:
                    break
                after = rows[-1].cursor(query.sort)
    except OSError as e:
        raise ConfigError(f"cannot write {folder} ({e.strerror or e}); nothing was exported (a new or empty "
                          "folder is needed)") from None
    return n


__all__ = ["WRITTEN_VERSION", "check_folder", "export_atif", "rollout_trajectory", "trajectory_steps"]
