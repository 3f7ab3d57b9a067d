"""How ``workbench runs`` and ``show`` print runs, a probe's policies and a run's rollouts.

In a terminal: a table whose ids are never cut (the other text columns fold); in a pipe or a file: whole
lines, tab-separated. Everything from the store is printed as text (``safe_text``), never as markup.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

from workbench.cli.common import console
from workbench.format import fnum, safe_text, visible

RUN_COLUMNS = ("run", "kind", "env", "model", "status", "rollouts", "errors", "mean reward", "started")
_NUMERIC = {"rollouts", "errors", "mean reward", "reward", "task", "sample"}
_ONE_LINE = {"completion"}  # a preview: one line, cut to the terminal


def fvalue(value: Any) -> str:
    """A value for people: a number to 3 decimals, a mapping as ``key value  key value``, a list comma-separated
    (never a Python repr)."""
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value).lower()
    if isinstance(value, float):
        return fnum(value)
    if isinstance(value, dict):
        return "  ".join(f"{k} {fvalue(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(fvalue(v) for v in value)
    return str(value)


def _cell(value: str) -> str:
    """A value as one tab-separated cell: control characters visible, no tab or newline inside."""
    return visible(value).replace("\t", " ").replace("\n", " ")


def print_table(cols: Sequence[str], rows: Sequence[Sequence[str]], whole: Sequence[str] = ("run",),
                short: Sequence[str] = ("kind", "status", "task", "sample", "rollouts", "errors", "reward")) -> None:
    """``rows`` under ``cols``; the ``whole`` columns (ids, times) are never cut or folded, nor are the ``short``
    ones (kinds, statuses, numbers): the other text columns fold in a narrow terminal."""
    if not console.is_terminal:  # a pipe or a file: whole lines, tab-separated, nothing cut
        sys.stdout.write("\n".join("\t".join(_cell(c) for c in row) for row in [cols, *rows]) + "\n")
        sys.stdout.flush()
        return
    from rich.table import Table

    t = Table(box=None, show_edge=False, pad_edge=False, collapse_padding=True)
    widths = [max([len(w) for w in col.split()] + [len(r[i]) for r in rows]) for i, col in enumerate(cols)]
    spare = console.width - (len(cols) - 1) - sum(w for c, w in zip(cols, widths, strict=True) if c not in _ONE_LINE)
    for i, col in enumerate(cols):
        keep = col in whole or col in short
        t.add_column(col, justify="right" if col in _NUMERIC else "left", no_wrap=keep or col in _ONE_LINE,
                     overflow="ellipsis" if col in _ONE_LINE else "fold", min_width=widths[i] if keep else None,
                     max_width=max(spare, 8) if col in _ONE_LINE else None)
    for row in rows:
        t.add_row(*(safe_text(c) for c in row))
    console.print(t, soft_wrap=False)


def print_runs(runs: list[dict[str, Any]]) -> None:
    """The run listing (a probe's entry: its pipeline id, its policies as the model)."""
    stamp = "%Y-%m-%d %H:%M" if not console.is_terminal or console.width >= 100 else "%m-%d %H:%M"
    rows = [(r["id"], r["kind"], r["env_name"], r["model"], r["status"], str(r["rollouts"]), str(r["errors"]),
             fnum(r["mean_reward"]), time.strftime(stamp, time.localtime(r["created_at"]))) for r in runs]
    print_table(RUN_COLUMNS, rows, whole=("run", "started"))


def print_pipeline(entry: dict[str, Any]) -> None:
    """A probe's policies: each a run, with its policy and mean reward."""
    console.print(safe_text(f"{entry['kind']} {entry['id']}  env {entry['env_name']}  {len(entry['runs'])} policies  "
                            f"{entry['rollouts']} rollouts  status {entry['status']}"))
    rows = [(m["id"], m["policy"], m["status"], str(m["rollouts"]), str(m["errors"]), fnum(m["mean_reward"]))
            for m in entry["runs"]]
    print_table(("run", "policy", "status", "rollouts", "errors", "mean reward"), rows)


def print_rollouts(page: dict[str, Any]) -> None:
    """A page of a run's rollouts, and how to see the next one."""
    rows = [(r["id"], str(r["task"]), str(r["sample"]), fnum(r["reward"]),
             r["status"] if r["status"] == "ok" or not r["error_kind"] else r["error_kind"], r["completion"])
            for r in page["rollouts"]]
    first, shown, total = page["offset"] + 1, len(rows), page["total"]
    if not rows:
        console.print(safe_text(f"no rollouts to show ({total} stored)"))
        return
    console.print(safe_text(f"rollouts {first}-{first + shown - 1} of {total}, {page['order']} first "
                            "(`workbench show ROLLOUT` opens one)"))
    print_table(("rollout", "task", "sample", "reward", "status", "completion"), rows, whole=("rollout",))
    if first + shown - 1 < total:
        console.print(safe_text(f"more: --offset {page['offset'] + shown} (or --page)"), style="dim")


__all__ = ["RUN_COLUMNS", "fvalue", "print_pipeline", "print_rollouts", "print_runs", "print_table"]
