"""The Environments screen's validation (``v``): ``workbench validate`` of the selected environment in a
thread worker, its report back as :class:`Validation.Done` and kept with the environment's state."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message
from workbench_app.env_state import EnvState, env_spec, safe_version
from workbench_app.format import clip, for_app
from workbench_app.workers import CancellableRun, post_ui

from workbench.authoring.discovery import EnvRef
from workbench.errors import WorkbenchError
from workbench.runs.validate import ValidationReport

if TYPE_CHECKING:
    from workbench_app.screens.environments.host import EnvironmentsHost


class Validation:
    class Done(Message):
        """A validation has ended: its report, or the error that stopped it; ``files`` is the hash of the
        files it is of (a reload of other files drops it)."""

        def __init__(self, name: str, files: str, report: ValidationReport | None, error: str) -> None:
            super().__init__()
            self.name, self.files, self.report, self.error = name, files, report, error

    def __init__(self, screen: EnvironmentsHost) -> None:
        self.screen = screen

    def start(self, st: EnvState) -> None:
        self.screen.notify(f"validating {st.name}…", timeout=2)
        name, ref = st.name, st.ref
        self.screen.run_worker(lambda: self._validate(name, ref), thread=True, exit_on_error=False,
                               group="env-validate")

    def _validate(self, name: str, ref: EnvRef) -> None:
        from workbench.runs.validate import validate_env

        files, spec = safe_version(ref), env_spec(ref)  # the hash of the files it validates
        try:
            rep = CancellableRun().run(lambda: validate_env(spec))
        except WorkbenchError as e:
            post_ui(self.screen, self.Done(name, files, None, for_app(e)))
        except Exception as e:
            post_ui(self.screen, self.Done(name, files, None, f"{type(e).__name__}: {e}"))
        else:
            post_ui(self.screen, self.Done(name, files, rep, ""))

    def apply(self, done: Done) -> None:
        st = self.screen.envs.get(done.name)
        if st is None:
            return
        st.report, st.report_error, st.report_files = done.report, done.error, done.files
        self.screen.show_detail()
        name, rep, error = done.name, done.report, done.error
        if error or rep is None:
            self.screen.notify(f"{name}: {clip(error, 200)}", title="validate failed", severity="error")
        else:
            self.screen.notify(f"{name}: {'ok' if rep.ok else f'{len(rep.problems)} problems'}, "
                               f"{len(rep.warnings)} warnings", title="validate",
                               severity="information" if rep.ok else "error")
