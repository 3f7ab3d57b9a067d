"""The Environments screen's format actions: the selected environment exported as a verifiers package
(``x``, ``workbench export-env ENV --format verifiers``), and an OpenAI eval imported as an environment folder
(the palette's "Import an OpenAI eval", ``workbench import-eval openai``).

Each asks its paths in a dialog, then runs the use case (:mod:`workbench.usecases.formats`) in a thread
worker; what it wrote, or the one line refusing it (nothing written), comes back as a notification. An
imported environment written into a user environment folder is listed at once: the worker posts
:class:`Packages.Imported`, and the catalog is scanned again with the cursor on it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from textual.message import Message
from workbench_app.env_state import EnvState, env_spec
from workbench_app.format import for_app
from workbench_app.screens.export import export_folder
from workbench_app.screens.format_dialogs import EvalFiles, ExportEnvDialog, ImportEvalDialog
from workbench_app.workers import notify_ui, post_ui

from workbench.config import paths
from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from workbench_app.screens.environments.host import EnvironmentsHost


def _failure(e: Exception) -> str:
    return for_app(e) if isinstance(e, WorkbenchError) else f"{type(e).__name__}: {e}"


def listed_folder(out: Path) -> bool:
    """Whether the environment folder ``out`` sits in a user environment folder (so the catalog lists it)."""
    return any(out.parent == d.expanduser().absolute() for d in paths.user_env_dirs())


class Packages:
    class Imported(Message):
        """An OpenAI eval was written as the environment folder ``path``, in a user environment folder."""

        def __init__(self, path: Path) -> None:
            super().__init__()
            self.path = path

    def __init__(self, screen: EnvironmentsHost) -> None:
        self.screen = screen
        self._select_after_scan: Path | None = None

    # -- export -----------------------------------------------------------------------------------
    def export(self, st: EnvState) -> None:
        """Ask the folder, then write ``st`` there as a verifiers package."""
        default = export_folder(self.screen.workbench_app.config) / f"{st.name}-verifiers"
        self.screen.app.push_screen(ExportEnvDialog(st.name, default), lambda out: self._export_to(st, out))

    def _export_to(self, st: EnvState, out: object) -> None:
        if not isinstance(out, Path):
            return  # cancelled
        self.screen.notify(f"exporting {st.name} to {out}…", timeout=2)
        spec = env_spec(st.ref)
        self.screen.run_worker(lambda: self._export(st.name, spec, out), thread=True, exit_on_error=False,
                               group="env-export")

    def _export(self, name: str, spec: str, out: Path) -> None:
        from workbench.usecases.formats import export_env_package, export_lines

        try:
            done = export_env_package(spec, out)
        except Exception as e:
            notify_ui(self.screen, f"{name}: {_failure(e)}", title="export refused", severity="error", timeout=10)
            return
        notify_ui(self.screen, "\n".join(export_lines(done)), title="exported", timeout=12)

    # -- import -----------------------------------------------------------------------------------
    def import_eval(self) -> None:
        """Ask the eval's files and the folder, then write the environment there."""
        envs = paths.user_env_dirs()[0].expanduser().absolute()
        self.screen.app.push_screen(ImportEvalDialog(envs, Path(os.getcwd())), self._import_to)

    def _import_to(self, files: object) -> None:
        if not isinstance(files, EvalFiles):
            return  # cancelled
        self.screen.notify(f"importing {files.eval_file.name}…", timeout=2)
        self.screen.run_worker(lambda: self._import(files), thread=True, exit_on_error=False, group="env-import")

    def _import(self, files: EvalFiles) -> None:
        from workbench.usecases.formats import import_lines, import_openai_eval

        try:
            res = import_openai_eval(files.eval_file, files.run_file, files.data_file, files.out)
        except Exception as e:
            notify_ui(self.screen, _failure(e), title="import refused", severity="error", timeout=10)
            return
        path = Path(res.path)
        lines = import_lines(res)
        if listed_folder(path):
            lines.append(f"listed here as {path.name}; e runs a quick eval")
            post_ui(self.screen, self.Imported(path))
        else:
            lines.append(f"not in a user environment folder, so not listed here: workbench eval {path} -m MODEL")
        notify_ui(self.screen, "\n".join(lines), title="imported", timeout=12)

    def imported(self, event: Imported) -> None:
        """List the environments again; :meth:`select_imported` puts the cursor on the new one once listed."""
        self._select_after_scan = event.path
        self.screen.catalog.scan(set())

    def select_imported(self) -> None:
        """After a scan: the environment just imported, selected."""
        path, self._select_after_scan = self._select_after_scan, None
        if path is None:
            return
        st = next((s for s in self.screen.envs.values() if s.ref.path is not None
                   and Path(s.ref.path).absolute() == path), None)
        if st is not None:
            self.screen.catalog.select(st)
