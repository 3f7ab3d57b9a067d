"""An eval card for people: one renderable that ``workbench hub show`` prints and the app's Hub scope shows.

The card itself is :func:`workbench.hub.browse.show` (what ``hub show --json`` prints); every value from
it is shown as text (control characters visible, no markup obeyed), as it comes from an index.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from workbench.format import fnum, safe_text, visible


def _table(title: str, columns: tuple[str, ...]) -> Table:
    table = Table(title=title, box=None, show_edge=False, header_style="bold", title_justify="left")
    for col in columns:
        table.add_column(col)
    return table


def card_renderable(card: dict[str, Any]) -> Group:
    """The card: its head (name, version, index, hash, env version, tasks, harness), what it was forked
    from, its description, its reward design, its published results and its README."""
    head = Text.assemble((visible(f"{card['env']} {card['version']}"), "bold"),
                         visible(f" on index {card.get('index', '-')}: hash {str(card['hash'])[:12]}, env version "
                                 f"{card['env_version']}, {card.get('tasks', '-')} tasks, harness "
                                 f"{card.get('harness', '-')}"))
    parts: list[Any] = [head]
    if card.get("forked_from"):
        f = card["forked_from"]
        parts.append(safe_text(f"forked from {f.get('name')} {f.get('version')} ({str(f.get('hash', ''))[:12]})",
                               style="italic"))
    if card.get("description"):
        parts.append(safe_text(card["description"]))
    rewards = _table("reward design", ("function", "kind", "weight", "what"))
    for r in card.get("rewards", []):
        rewards.add_row(safe_text(r["name"]), safe_text(r["kind"]), f"{r['weight']:g}", safe_text(r["doc"]))
    parts.append(rewards)
    results = _table("results", ("model", "reward", "n", "pass@k", "cost", "env version", "date"))
    for r in card.get("results", []):
        se = f" (se {r['stderr']:.3f})" if r.get("stderr") is not None else ""
        results.add_row(safe_text(r["model"]), fnum(r.get("mean_reward")) + se, safe_text(r.get("rollouts")),
                        safe_text(" ".join(f"{k} {v:.2f}" for k, v in (r.get("pass_at_k") or {}).items())),
                        "-" if r.get("cost_usd") is None else f"${r['cost_usd']:.4f}", safe_text(r.get("env_version")),
                        safe_text(r.get("date")))
    parts.append(results if card.get("results") else Text("no results were published with this version", style="dim"))
    if card.get("readme"):
        parts += [Text(""), safe_text(card["readme"].strip())]
    return Group(*parts)


__all__ = ["card_renderable"]
