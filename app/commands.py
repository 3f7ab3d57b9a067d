"""Command palette provider: every screen and the main actions, by name."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

#: (mode, title, help) for every top-level screen.
SCREENS: list[tuple[str, str, str]] = [
    ("environments", "Environments", "Bundled and user environments: validate, quick eval, edit, hot reload"),
    ("traces", "Traces", "Browse, filter, search and export every stored rollout"),
    ("runs", "Runs", "Past and live runs with their summaries; S stops a launched run"),
    ("costs", "Costs", "The cost ledger by run, provider and day; budgets"),
    ("debugger", "Debugger", "Run one rollout turn by turn, see its tokens by logprob; or open a stored one"),
]


class WorkbenchCommands(Provider):
    """Go to a screen, toggle the theme, show the key help."""

    def _commands(self) -> list[tuple[str, Callable[[], object], str]]:
        app = self.app
        cmds: list[tuple[str, Callable[[], object], str]] = [
            (f"Go to {title}", partial(app.switch_mode, mode), text) for mode, title, text in SCREENS
        ]
        cmds.append(("Toggle light/dark theme", partial(app.run_action, "toggle_theme"), "Switch between themes"))
        cmds.append(("Show keys (help)", partial(app.run_action, "help"), "List the key bindings of this screen"))
        return cmds

    async def discover(self) -> Hits:
        for name, callback, text in self._commands():
            yield DiscoveryHit(name, callback, help=text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, callback, text in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=text)
