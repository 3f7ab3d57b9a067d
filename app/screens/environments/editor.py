"""The Environments screen's editing: the selected environment's file in ``$VISUAL``/``$EDITOR`` (``o``), and a
new environment from a template (``n``), listed, selected and opened in the editor once the catalog has it."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from workbench_app.env_state import EnvState, source_file
from workbench_app.format import fpath
from workbench_app.screens.new_env import NewEnvScreen

if TYPE_CHECKING:
    from workbench_app.screens.environments.host import EnvironmentsHost


class Editor:
    def __init__(self, screen: EnvironmentsHost) -> None:
        self.screen = screen
        self._open_after_scan: Path | None = None

    def open(self, st: EnvState | None) -> None:
        """``st``'s file in the editor, the app suspended meanwhile; back here, ``st`` reloads."""
        screen = self.screen
        path = source_file(st.ref) if st else None
        if st is None or path is None:
            screen.notify("this environment has no source file to open", severity="warning")
            return
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        argv = [*shlex.split(editor), str(path)]
        try:
            with screen.app.suspend():
                subprocess.call(argv)
        except FileNotFoundError:
            screen.notify(f"editor {argv[0]!r} not found; set $EDITOR", severity="error")
            return
        except Exception as e:  # SuspendNotSupported and friends
            screen.notify(f"cannot open an editor here ({e}); the file is {path}", severity="warning")
            return
        screen.catalog.scan({st.name})

    def new_env(self) -> None:
        self.screen.app.push_screen(NewEnvScreen(), self._created)

    def _created(self, path: Path | None) -> None:
        """List the new env; :meth:`open_created` selects it and opens its file once it is listed."""
        if path is None:
            return
        self.screen.notify(f"created {path.name} in {fpath(path.parent)}", title="new environment")
        self._open_after_scan = path
        self.screen.catalog.scan(set())

    def open_created(self) -> None:
        """After a scan: the environment just created, selected and in the editor."""
        path, self._open_after_scan = self._open_after_scan, None
        if path is None:
            return
        screen = self.screen
        st = next((s for s in screen.envs.values() if s.ref.path == path), None)
        if st is None:
            screen.notify(f"{path} is not on the environment search path; use it by path", severity="warning")
            return
        screen.catalog.select(st)
        self.open(st)
