"""What the Runs screen shows of a pipeline (``workbench optimize`` / ``workbench distill``): for an
optimisation run its candidates, their scores and the held-out before/after, read from the run's
summary (which the search updates as it goes); for any run that is a stage of a pipeline, which one."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from workbench_app.format import fcost, fnum, safe_text

PROMPT_CHARS = 90


def pipeline_line(run: dict[str, Any]) -> str | None:
    """``optimize opt-1a2b3c4d — candidate 3`` for a run that is a stage of a pipeline, else None."""
    p = (run.get("config") or {}).get("pipeline")
    if not isinstance(p, dict) or not p.get("id"):
        return None
    stage = p.get("stage") or ""
    return f"{p.get('kind', '')} {p['id']}" + (f" — {stage}" if stage and stage != p.get("kind") else "")


def optimize_renderable(run: dict[str, Any]) -> Group:
    """An optimisation's progress: status, spend, the held-out scores and the candidates, best first."""
    s = run.get("summary") or {}
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold", no_wrap=True)
    head.add_column()
    head.add_row("optimisation", safe_text(f"{run['id']}  ({s.get('status') or run.get('status', '')})"))
    head.add_row("env", safe_text(f"{s.get('env', run.get('env_name'))} @ "
                                  f"{s.get('env_version') or run.get('env_version') or '-'}"))
    head.add_row("model", safe_text(f"{s.get('model') or run.get('model') or '-'}; reflection by "
                                    f"{s.get('reflection_model') or '-'}"))
    head.add_row("search", f"{s.get('evals', 0)} of {s.get('max_evals', '-')} rollouts, "
                           f"{s.get('reflection_calls', 0)} reflection calls, cost {fcost(s.get('cost_usd'))}")
    before, after = s.get("heldout_before") or {}, s.get("heldout_after") or {}
    held = f"before {fnum(before.get('mean_reward'))}"
    if after:
        held += f"   after {fnum(after.get('mean_reward'))}"
    cmp = s.get("comparison") or {}
    if cmp.get("ci95") and before.get("run_id") != after.get("run_id"):
        lo, hi = cmp["ci95"]
        held += f"   Δ {cmp['delta']:+.3f} (95% CI {lo:+.3f} to {hi:+.3f}{', significant' if cmp.get('significant') else ''})"
    head.add_row(f"held-out ({s.get('heldout_tasks', '-')} tasks)", held)
    if run.get("error"):
        head.add_row("error", safe_text(run["error"], style="red"))
    cands = Table(box=None, show_edge=False, header_style="bold", pad_edge=False)
    for col in ("#", "from", "score", "mean", "n", "prompt"):
        cands.add_column(col, justify="left" if col == "prompt" else "right", no_wrap=col != "prompt")
    best = s.get("best_prompt")
    for c in sorted(s.get("candidates") or [], key=lambda c: -(c["score"] if c.get("score") is not None else -1)):
        prompt = " ".join(str(c.get("prompt") or "").split()) or "(no system prompt)"
        style = "bold green" if best is not None and c.get("prompt") == best else ""
        cands.add_row(str(c["index"]), "-" if c.get("parent") is None else str(c["parent"]), fnum(c.get("score")),
                      fnum(c.get("mean_reward")), str(c.get("rollouts", 0)),
                      Text(prompt[:PROMPT_CHARS] + ("…" if len(prompt) > PROMPT_CHARS else ""), style=style))
    return Group(head, Text(""), cands)


__all__ = ["optimize_renderable", "pipeline_line"]
