"""The Environments screen's hand-offs of the selected environment to other screens: the Debugger (``d``),
Play (``p``), the probe (``P``) and the Hub scope (``H``; back from it, the catalog is scanned again, since
a pull or a fork adds an environment)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench_app.env_state import EnvState, env_spec

if TYPE_CHECKING:
    from workbench_app.screens.environments.host import EnvironmentsHost


class Handoffs:
    def __init__(self, screen: EnvironmentsHost) -> None:
        self.screen = screen

    def debug(self, st: EnvState) -> None:
        self.screen.workbench_app.open_debugger(env_spec=env_spec(st.ref))

    def play(self, st: EnvState) -> None:
        """Play ``st``'s first task yourself (the Debugger's p plays any task)."""
        self.screen.workbench_app.open_play(env_spec(st.ref), 0, st.name)

    def probe(self, st: EnvState) -> None:
        """The adversarial probe of ``st`` (``workbench probe``), its table when done."""
        if not self.screen.workbench_app.require_writable("a probe"):
            return
        from workbench_app.screens.probe import ProbeScreen

        self.screen.app.push_screen(ProbeScreen(env_spec(st.ref), st.name))

    def hub(self) -> None:
        """The Hub scope: the environments on a package index."""
        from workbench_app.screens.hub import HubScreen

        self.screen.app.push_screen(HubScreen(), lambda _: self.screen.catalog.scan(set()))
