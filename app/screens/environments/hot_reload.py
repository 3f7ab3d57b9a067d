"""The Environments screen's hot reload: a watch of the environments' folders that rescans what changes.

The watch is an async Textual worker on the UI loop (``watchfiles.awatch`` only awaits); each batch of
changes asks the catalog to reload the environments whose files changed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from workbench_app.env_state import affected

if TYPE_CHECKING:
    from workbench_app.screens.environments.host import EnvironmentsHost


class HotReload:
    def __init__(self, screen: EnvironmentsHost) -> None:
        self.screen = screen
        self._stop: asyncio.Event | None = None
        self.watching: list[Path] | None = None  # the folders the watcher watches

    @property
    def started(self) -> bool:
        return self._stop is not None

    def follow(self, dirs: list[Path]) -> None:
        """Watch ``dirs`` unless they are what is watched already (a new env outside them joins the watch)."""
        if dirs != self.watching:
            self.screen.run_worker(self._watch(dirs), group="env-watch", exclusive=True, exit_on_error=False)

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    async def _watch(self, dirs: list[Path]) -> None:
        """Watch ``dirs`` (replacing the watch of other folders) and reload what changes in them."""
        self.stop()
        stop = self._stop = asyncio.Event()
        self.watching = dirs
        if not dirs:
            return
        try:
            from watchfiles import awatch

            async for changes in awatch(*dirs, debounce=150, step=50, stop_event=stop):
                changed = [Path(p) for _, p in changes if not p.endswith((".pyc", "~"))]
                refs_now = [s.ref for s in self.screen.envs.values()]
                self.screen.catalog.scan(affected(refs_now, changed))
        except Exception as e:  # the watcher is a convenience: say so and go on without it
            if not stop.is_set():
                self.screen.notify(f"hot reload stopped: {e}; press r to reload by hand", severity="warning")
