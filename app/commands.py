"""Command palette provider: every screen and the main actions, by name."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.screens.trajectory_import import TrajectoryImport

#: (mode, title, help) for every top-level screen.
SCREENS: list[tuple[str, str, str]] = [
    ("environments", "Environments", "Bundled and user environments: validate, quick eval, edit, hot reload"),
    ("traces", "Traces", "Browse, filter, search and export every stored rollout"),
    ("runs", "Runs", "Past and live runs with their summaries; S stops a launched run"),
    ("costs", "Costs", "The cost ledger by run, provider and day; budgets"),
    ("debugger", "Debugger", "Run one rollout turn by turn, see its tokens by logprob; or open a stored one"),
    ("settings", "Settings", "Models, the model each use calls, the budget, your name, hub indexes (6)"),
]

#: More names that lead to Settings: (title, help).
SETTINGS_ACTIONS: list[tuple[str, str]] = [
    ("Models: add, remove or test a model", "The registered models (workbench models), in Settings"),
    ("Choose the model for quick eval, Play and the Debugger", "Which registered model each use calls"),
    ("Set the monthly budget", "[budget] monthly_usd: Costs shows it at once"),
    ("Add a hub package index", "Where H on Environments browses, pulls and forks environments"),
]

#: (action, title, help) of the Environments screen's actions on the selected environment.
ENV_ACTIONS: list[tuple[str, str, str]] = [
    ("launch", "Launch a training run of the selected environment", "The launch dialog with its plan and cost (L)"),
    ("new_env", "New environment from a template", "single-turn, tools, multi-turn or sandboxed (n)"),
    ("debug", "Debug the selected environment", "One rollout turn by turn in the Debugger (d)"),
    ("play", "Play the selected environment yourself", "You write each assistant turn; stored as human (p)"),
    ("rescore", "Re-score the selected environment's stored rollouts", "Before/after reward distribution (R)"),
    ("validate", "Validate the selected environment", "Load it, check tasks and rubric, score gold answers (v)"),
    ("export_package", "Export the selected environment as a verifiers package",
     "A pip-installable package vf-eval scores as workbench eval does (x)"),
    ("import_eval", "Import an OpenAI eval as an environment",
     "The eval, one of its runs and its items, written as an environment folder"),
]


class WorkbenchCommands(Provider):
    """Go to a screen, act on the selected environment, toggle the theme, show the key help."""

    async def _on_environment(self, action: str) -> None:
        """Go to Environments and run ``action`` there once its catalog is loaded (a first visit lists and
        loads the environments in a worker)."""
        await self.app.switch_mode("environments")
        screen = self.app.screen
        if isinstance(screen, EnvironmentsScreen):
            loaded = asyncio.Event()
            screen.catalog.when_loaded(loaded.set)
            await loaded.wait()
        await screen.run_action(action)

    def _import_trajectories(self) -> None:
        TrajectoryImport(self.app).ask()

    def _commands(self) -> list[tuple[str, Callable[[], object], str]]:
        app = self.app
        cmds: list[tuple[str, Callable[[], object], str]] = [
            (f"Go to {title}", partial(app.switch_mode, mode), text) for mode, title, text in SCREENS
        ]
        cmds += [(title, partial(self._on_environment, action), text) for action, title, text in ENV_ACTIONS]
        cmds += [(title, partial(app.switch_mode, "settings"), text) for title, text in SETTINGS_ACTIONS]
        cmds.append(("Import Harbor ATIF trajectories as a run", self._import_trajectories,
                     "A trajectory file, a trial or a job folder, imported as workbench import --format atif does"))
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
