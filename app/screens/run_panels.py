"""The Runs screen's panels: a run's summary (what ``workbench show RUN`` prints), a probe's pipeline
(its policies' runs), the cells of a run's row, and the model a run names (its registered name)."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from workbench_app.format import fcost, fnum, ftime, safe_text, visible
from workbench_app.widgets.pipeline_view import pipeline_line

STATUS_STYLE = {"completed": "green", "running": "cyan", "interrupted": "yellow", "failed": "bold red"}
MARK = "●"  # in the row of a run marked for Compare
COLUMNS = ("mark", "run", "kind", "env", "model", "status", "n", "err", "reward", "started")


def model_label(run: dict[str, Any]) -> str:
    """The run's model as the user called it: the registered name it was run under, else the model id."""
    return str(run.get("model_name") or run.get("model") or "")


def pipeline_renderable(entry: dict[str, Any]) -> Table:
    """A probe's (or ``validate``'s) pipeline: one row per policy run, with its reward (Enter lists them)."""
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold", no_wrap=True)
    t.add_column()
    t.add_row("pipeline", safe_text(f"{entry['id']}  ({entry.get('kind', '')})"))
    t.add_row("env", safe_text(f"{entry['env_name']} @ {entry.get('env_version') or '-'}"))
    t.add_row("status", safe_text(entry["status"], style=STATUS_STYLE.get(entry["status"], "")))
    t.add_row("started", ftime(entry.get("created_at")))
    runs = entry.get("runs") or []
    t.add_row("policies", safe_text("\n".join(f"{r['policy']}  {fnum(r['mean_reward'])}  ({r['id']})"
                                                for r in runs) or "-"))
    t.add_row("", Text("Enter lists its runs; escape goes back", style="dim"))
    return t


def summary_renderable(run: dict[str, Any], s: dict[str, Any]) -> Table:
    """The run summary as a two-column table: what ``workbench show RUN`` prints, in the app."""
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold", no_wrap=True)
    t.add_column()
    status = safe_text(s.get("status") or run.get("status", ""), style=STATUS_STYLE.get(run.get("status", ""), ""))
    if run.get("error"):
        status.append(visible(f" — {run['error']}"), style="red")
    t.add_row("run", safe_text(f"{s['run_id']}  ({run.get('kind', 'eval')})"))
    stage = pipeline_line(run)
    if stage:
        t.add_row("pipeline", safe_text(stage))
    t.add_row("env", safe_text(f"{s['env']} @ {s.get('env_version') or '-'}"))
    registered = (run.get("config") or {}).get("model_name")
    t.add_row("model", safe_text((s.get("model") or "-") + (f" (registered as {registered})" if registered else "")))
    t.add_row("status", status)
    t.add_row("started", ftime(run.get("created_at")))
    t.add_row("rollouts", f"{s['rollouts']} over {s['tasks']} tasks, {s['errors']} errors")
    mean = fnum(s.get("mean_reward"))
    if s.get("stderr") is not None:
        mean += f" ± {s['stderr']:.3f}"
    t.add_row("mean reward", mean)
    if s.get("pass_at_k"):
        t.add_row(f"pass@k (≥{s.get('pass_threshold', 1.0):g})",
                  "  ".join(f"{k} {v:.3f}" for k, v in s["pass_at_k"].items()))
    for title, key in (("rewards", "rewards"), ("metrics", "metrics")):
        vals = s.get(key) or {}
        if vals:
            t.add_row(title, safe_text("\n".join(f"{name}  {fnum(v)}" for name, v in vals.items())))
    kinds = s.get("error_kinds") or {}
    if kinds:
        t.add_row("error kinds", safe_text("\n".join(f"{k}  {c}" for k, c in kinds.items()), style="red"))
    t.add_row("tokens", f"{s.get('prompt_tokens', 0):,} prompt / {s.get('completion_tokens', 0):,} completion")
    t.add_row("cost", fcost(s.get("cost_usd")))
    if s.get("mean_rollout_s") is not None:
        t.add_row("mean rollout", f"{s['mean_rollout_s']:.2f} s")
    stored = run.get("summary") or {}
    if stored.get("rollouts_per_s"):
        t.add_row("throughput", f"{stored['rollouts_per_s']:.1f} rollouts/s")
    return t


def mark_cell(marked: bool) -> Text | str:
    """The mark column's cell: ● for a run marked for Compare."""
    return Text(MARK, style="bold magenta") if marked else ""


def row_cells(r: dict[str, Any], marked: bool) -> list[Any]:
    """A run's (or a probe pipeline's) row in the list, in :data:`COLUMNS` order."""
    return [mark_cell(marked), r["id"], r.get("kind", ""), r["env_name"], model_label(r),
            Text(r["status"], style=STATUS_STYLE.get(r["status"], "")), str(r["rollouts"]), str(r["errors"]),
            fnum(r["mean_reward"]), ftime(r["created_at"], short=True)]
