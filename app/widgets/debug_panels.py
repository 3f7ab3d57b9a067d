"""What the Debugger shows, as plain data (:class:`DebugView`) and as rich renderables.

A view is built either from a live :class:`~workbench.runs.debug_session.DebugSession` or from a stored
rollout (read-only), so both look the same on screen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text
from workbench_app.format import ROLE_COLORS, fcost, fnum, safe_text, visible
from workbench_app.widgets.message_text import message_body

from workbench.runs.debug_report import DebugResult, ScoreLine
from workbench.runs.debug_session import DebugSession
from workbench.store.prices import Price


@dataclass(slots=True)
class TurnRow:
    turn: int  # 1-based
    model_s: float
    env_s: float | None  # None where unknown (a stored rollout keeps only the model latency)
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    finish: str | None


@dataclass(slots=True)
class DebugView:
    title: str
    status: str  # one line: where the rollout is and what the keys do next
    messages: list[dict[str, Any]] = field(default_factory=list)
    turn_starts: dict[int, int] = field(default_factory=dict)  # message index -> turn (1-based) it answers
    turns: list[TurnRow] = field(default_factory=list)
    scores: list[ScoreLine] = field(default_factory=list)
    reward: float | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    scored: bool = False


def _turn_starts(n_messages: list[int]) -> dict[int, int]:
    """Call ``i`` was sent the first ``n`` messages, so message ``n`` is its reply: turn ``i + 1`` starts there."""
    return {n: i + 1 for i, n in enumerate(n_messages)}


def live_view(s: DebugSession) -> DebugView:
    """A snapshot of a live session (read on the UI thread while the session's loop is paused or busy)."""
    env = s.env.name if s.env is not None else s.opts.env
    title = f"{env} · task {s.task_index}" + (f" · run {s.run_id}" if s.run_id else "")
    r = s.rollout
    calls = list(r.calls) if r is not None else []
    turns = [TurnRow(t.index + 1, t.model_s, t.env_s, t.call.prompt_tokens if t.call else 0,
                     t.call.completion_tokens if t.call else 0, t.cost_usd, t.call.finish_reason if t.call else None)
             for t in list(s.turns)]
    res = s.result
    status = {
        "new": "press n to start the rollout (one model turn at a time) or r to run it to the end",
        "starting": "starting: loading the environment and reaching the model…",
        "paused": f"paused before model call {len(calls) + 1}: n next turn · r run to end · t tokens",
        "running": f"turn {len(calls) + 1} running…",
        "done": done_status(res),
        "failed": f"failed: {s.error}" + (f"; stored as {res.rollout_id}" if res else ""),
        "closed": "closed",
    }.get(s.status, s.status)
    return DebugView(title, status, s.messages, _turn_starts([c.n_messages for c in calls]), turns,
                     res.scores if res else [], res.reward if res else None,
                     res.errors if res else [dict(kind=e.kind, source=e.source, message=e.message)
                                             for e in (r.errors if r is not None else [])],
                     scored=res is not None)


def done_status(res: DebugResult | None) -> str:
    """What an ended rollout did: scored and stored, or failed (no scores) and stored all the same."""
    if res is None:
        return "done"
    what = "the rollout failed (no scores)" if res.errors and not res.scores else "scored"
    return f"done: {what}; stored as {res.rollout_id} (Traces lists it once K shows debug runs)"


def stored_view(r: dict[str, Any], price: Price | None, scores: list[ScoreLine] | None = None) -> DebugView:
    """A stored rollout (``get_rollout``), read-only; ``scores``: its values matched to the rubric's
    functions when its environment could be loaded (else by name only)."""
    calls = r.get("calls") or []
    turns = [TurnRow(i + 1, (c.get("latency_ms") or 0.0) / 1000, None, c.get("prompt_tokens") or 0,
                     c.get("completion_tokens") or 0,
                     price.cost(c.get("prompt_tokens") or 0, c.get("completion_tokens") or 0) if price else None,
                     c.get("finish_reason")) for i, c in enumerate(calls)]
    if scores is None:
        scores = [ScoreLine(k, k, "reward", None, v) for k, v in (r.get("rewards") or {}).items()]
        scores += [ScoreLine(k, k, "metric", None, v) for k, v in (r.get("metrics") or {}).items()]
    return DebugView(f"{r.get('env_name', '?')} · task {r.get('task_index', '?')} · rollout {r['id']}",
                     f"read-only: {r['id']} ({r.get('status')}) · t tokens · x runs it live",
                     list(r.get("messages") or []), _turn_starts([c.get("n_messages") or 0 for c in calls]),
                     turns, scores, r.get("reward"), list(r.get("errors") or []), scored=True)


def transcript(view: DebugView) -> RenderableType:
    if not view.messages:
        return Text("no messages yet", style="dim")
    parts: list[RenderableType] = []
    for i, m in enumerate(view.messages):
        if i in view.turn_starts:
            parts.append(Rule(f"turn {view.turn_starts[i]}", style="dim", align="left"))
        role = str(m.get("role", "?"))
        name = m.get("name") or m.get("tool_call_id")
        title = role + (f" ({name})" if name else "")
        parts.append(Panel(message_body(m), title=safe_text(title), title_align="left",
                           border_style=ROLE_COLORS.get(role, "white"), expand=True))
    return Group(*parts)


def turns_table(view: DebugView) -> RenderableType:
    if not view.turns:
        return Text("no turns yet", style="dim")
    t = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for col in ("turn", "model", "tools/env", "tok in→out", "cost"):
        t.add_column(col, justify="left" if col == "turn" else "right")
    for row in view.turns:
        t.add_row(str(row.turn), f"{row.model_s:.2f}s", "-" if row.env_s is None else f"{row.env_s:.2f}s",
                  f"{row.prompt_tokens}→{row.completion_tokens}", fcost(row.cost_usd))
    return t


def scores_table(view: DebugView) -> RenderableType:
    if not view.scored:
        return Text("scored when the rollout ends", style="dim")
    if not view.scores:
        return Text("no scores (the rollout failed)" if view.errors else "no scores", style="dim")
    t = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for col in ("function", "kind", "weight", "value"):
        t.add_column(col, justify="right" if col in ("weight", "value") else "left")
    for s in view.scores:
        t.add_row(safe_text(s.name), Text(s.kind, style="dim" if s.kind == "metric" else ""),
                  "-" if s.weight is None else f"{s.weight:g}", fnum(s.value))
    return Group(Text.assemble(("total reward ", "bold"), (fnum(view.reward), "bold")), t)


def errors_text(view: DebugView) -> Text:
    out = Text()
    for e in view.errors:
        out.append(visible(e.get("kind")), style="bold red")
        out.append(visible(f" in {e.get('source')}: {e.get('message')}") + "\n")
    out.rstrip()
    return out
