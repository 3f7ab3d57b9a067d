"""A rollout's MCP tool calls as a table, for the transcript (``workbench show``) and the app.

The engine records each call in the rollout's ``state["mcp_calls"]``: server, tool, arguments, result
(its first characters), whether it failed, milliseconds, and who called (the model or a reward).
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

_CELL = 60


def _short(value: Any) -> str:
    import orjson

    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    text = " ".join(text.split())
    return text if len(text) <= _CELL else text[: _CELL - 1] + "…"


def mcp_calls(state: Any) -> list[dict[str, Any]]:
    calls = state.get("mcp_calls") if isinstance(state, dict) else None
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def mcp_calls_table(state: Any) -> Table | None:
    """One row per MCP call (None when the rollout made none)."""
    calls = mcp_calls(state)
    if not calls:
        return None
    t = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for col in ("by", "server", "tool", "arguments", "result", "ms"):
        t.add_column(col, justify="right" if col == "ms" else "left", overflow="ellipsis", no_wrap=col in ("by", "server", "tool", "ms"))
    for c in calls:
        result = Text(_short(c.get("result", "")), style="red" if c.get("error") else "")
        t.add_row(str(c.get("by", "")), str(c.get("server", "")), str(c.get("tool", "")),
                  _short(c.get("arguments", {})), result, f"{float(c.get('ms') or 0):.1f}")
    return t
