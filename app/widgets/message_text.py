"""A chat message as Rich text: its content, then each tool call as ``→ name(arguments)``; shown by the
rollout screen and the debugger's panels."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from workbench_app.format import safe_text, visible

from workbench.records.rollout import content_text


def message_body(m: dict[str, Any]) -> Text:
    body = safe_text(content_text(m.get("content")))
    for tc in m.get("tool_calls") or []:
        fn = tc.get("function") or {}
        if body:
            body.append("\n")
        body.append("→ ", style="bold yellow")
        body.append(visible(fn.get("name", "?")), style="bold")
        body.append(visible(f"({fn.get('arguments', '')})"), style="italic")
    if not body:
        body = Text("(empty)", style="dim")
    return body
