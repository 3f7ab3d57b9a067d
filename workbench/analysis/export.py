"""Exporting stored rollouts as JSON lines: ``workbench export`` and the app's Traces screen both call
:func:`export_rollouts`.

Formats: ``sft`` — chat rows ready for supervised fine-tuning, with one schema whatever the rollouts
hold, so files exported from different runs load together (``datasets.load_dataset("json",
data_files=[...])``) and feed TRL's ``SFTTrainer`` as they are:

- ``messages``: the conversation as OpenAI chat messages; every assistant message carries
  ``tool_calls`` (a list, empty when it called no tool), so each row's messages are one JSON type;
- ``tools``: the tool definitions the conversation was offered, as a JSON string of OpenAI tool
  definitions (``"[]"`` without tools; TRL decodes a string ``tools`` column itself);
- ``metadata``: a JSON string of run, rollout, env and its version, model, task, reward, status,
  answer, info and source (a string, so no row's values change the column's type).

``rollouts`` — every stored field of each rollout (messages, scores, model calls, errors). The rows
are the rollouts a :class:`~workbench.store.queries.RolloutFilter` selects, read page by page in its
order.

A file is written to a temporary name beside it and renamed into place, so a failed export leaves
the old file (or none); the store itself and its WAL and shared-memory files are never an output.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from workbench.errors import ConfigError, OptionError
from workbench.fsutil import atomic_open
from workbench.records.rollout import OFFERED_TOOLS
from workbench.store.queries import RolloutFilter, get_rollout, page_rollouts
from workbench.store.reports import trace_nodes
from workbench.store.run_kinds import USER_KINDS

OUTPUT = "export.output"  # the field of the file an export writes (``-o``)
FORMATS = ("sft", "rollouts")


#: The kinds of run a source's rollouts come from beyond the user's own (a person's rollouts are Play's).
KINDS_OF_SOURCE: dict[str, tuple[str, ...]] = {"human": ("play",)}


def run_filter(run_id: str | None, *, min_reward: float | None = None, include_errors: bool = False,
               source: str | None = None) -> RolloutFilter:
    """The rollouts of one run, or of every run (``run_id`` None), from one ``source`` (model, imported,
    human) or all: the ``workbench export`` selection, in the order they were stored. Every run's means the
    user's own kinds of run, and the kind the source's rollouts are made by (``--source human``: Play's)."""
    kinds = (*USER_KINDS, *KINDS_OF_SOURCE.get(source or "", ()))
    return RolloutFilter(run_id=run_id, min_reward=min_reward, error_kind=None if include_errors else "none",
                         source=source, kinds=kinds)


def _json(obj: Any) -> str:
    return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS, default=str).decode()


def _sft_message(m: Any) -> Any:
    if isinstance(m, dict) and m.get("role") == "assistant" and not m.get("tool_calls"):
        return {**m, "tool_calls": []}
    return m


def rollout_tools(conn: Any, r: dict[str, Any]) -> list[Any]:
    """The tool definitions a rollout's conversation was offered: an imported one's from its file, a
    model rollout's from its state (:data:`~workbench.records.rollout.OFFERED_TOOLS`: the tools its
    latest call that sent tools offered, kept with or without a token trace), else, for a rollout
    stored before the state kept them, from its trace."""
    stored = r.get("state")
    state: dict[str, Any] = stored if isinstance(stored, dict) else {}
    found = state.get("import")
    imported: dict[str, Any] | None = found if isinstance(found, dict) else None
    if imported is not None:
        return imported.get("tools") or []
    offered = state.get(OFFERED_TOOLS)
    if isinstance(offered, list) and offered:
        return offered
    nodes = trace_nodes(conn, r["pk"])
    if nodes is None:
        return []
    try:
        doc = orjson.loads(nodes)
    except orjson.JSONDecodeError:
        return []
    sets, per_call = doc.get("tool_sets") or [], doc.get("call_tools") or []
    last = next((i for i in reversed(per_call) if isinstance(i, int) and 0 <= i < len(sets)), None)
    return sets[last] if last is not None else []


def _sft_row(r: dict[str, Any], run: dict[str, Any], tools: list[Any]) -> dict[str, Any]:
    return {"messages": [_sft_message(m) for m in r["messages"]],
            "tools": _json(tools),
            "metadata": _json({"run_id": r["run_id"], "rollout_id": r["id"], "env": run.get("env_name"),
                               "env_version": run.get("env_version"), "model": run.get("model"),
                               "task_id": r.get("task_id"), "task_index": r["task_index"],
                               "sample_index": r["sample_index"], "reward": r["reward"], "status": r["status"],
                               "answer": r["answer"], "info": r["info"], "source": r.get("source", "model"),
                               **({"human": r["state"]["human"]} if (r.get("state") or {}).get("human") else {})})}


def iter_rows(store: Any, query: RolloutFilter, fmt: str = "sft", page: int = 500) -> Iterator[dict[str, Any]]:
    """The export rows of every rollout ``query`` selects."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    conn = store.conn
    runs: dict[str, dict[str, Any]] = {}
    after = None
    while True:
        rows = page_rollouts(conn, query, limit=page, after=after)
        for summary in rows:
            r = get_rollout(conn, summary.pk)
            if fmt == "rollouts":
                yield r
                continue
            if r["run_id"] not in runs:
                runs[r["run_id"]] = store.get_run(r["run_id"])
            yield _sft_row(r, runs[r["run_id"]], rollout_tools(conn, r))
        if len(rows) < page:
            return
        after = rows[-1].cursor(query.sort)


def check_output(path: Path, store_path: Path | None) -> Path:
    """``path`` made absolute, refused in one clear line when it cannot be an export's output."""
    out = Path(os.path.abspath(path.expanduser()))
    if out.is_dir():
        raise OptionError(OUTPUT, path, template="{field} {value} is a directory; give a file path such as {example}",
                          example=out / "export.jsonl")
    if not out.parent.is_dir():
        raise OptionError(OUTPUT, path, template="{field} {value}: the folder {folder} does not exist; create it or "
                          "choose another path", folder=out.parent)
    if store_path is not None:
        db = Path(os.path.abspath(store_path))
        protected = {db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"),
                     db.with_name(db.name + "-journal")}
        if out in protected or (out.exists() and any(p.exists() and out.samefile(p) for p in protected)):
            raise OptionError(OUTPUT, path, template="{field} {value} is the store itself (or its WAL); choose another "
                              "output file")
    return out


def export_rollouts(store: Any, query: RolloutFilter, dest: Path | BinaryIO, fmt: str = "sft") -> int:
    """Write the rows to ``dest`` (a file path: written atomically; or an open binary stream); returns
    how many rows were written."""
    options = orjson.OPT_NON_STR_KEYS
    if not isinstance(dest, Path):
        n = 0
        for row in iter_rows(store, query, fmt):
            dest.write(orjson.dumps(row, option=options, default=str) + b"\n")
            n += 1
        dest.flush()
        return n
    out = check_output(dest, getattr(store, "path", None))
    try:
        with atomic_open(out) as f:
            n = export_rollouts(store, query, f, fmt)
    except OSError as e:
        raise ConfigError(f"cannot write {dest} ({e.strerror or e}); choose another output file") from None
    return n


__all__ = ["FORMATS", "check_output", "export_rollouts", "iter_rows", "rollout_tools", "run_filter"]
