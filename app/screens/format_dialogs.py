"""The dialogs of the format actions: where to write an environment exported as a verifiers package (``x`` on
Environments), the three files of an OpenAI eval with the folder its environment is written to (the
palette's "Import an OpenAI eval"), and the Harbor ATIF trajectories to import as a run (the palette's
"Import Harbor ATIF trajectories").

Enter (or the primary button) dismisses with what was typed, paths made absolute (a relative one is taken
from the folder the dialog names); escape cancels. An empty field is one notification and the dialog stays
open. Whether the paths hold what they should is the domain's to say, in one line, with nothing written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, Static
from workbench_app.format import fpath
from workbench_app.screens.dialog import Dialog


def absolute(text: str, folder: Path) -> Path:
    """What was typed as an absolute path (``~`` expanded; relative: in ``folder``)."""
    path = Path(text.strip()).expanduser()
    return (path if path.is_absolute() else folder / path).absolute()


_CSS = """
{cls} {{ align: center middle; }}
{cls} > Vertical {{ width: 90; max-width: 100%; height: auto; border: thick $primary; background: $surface;
                   padding: 0 1; }}
{cls} .fd-title {{ height: auto; }}
{cls} .fd-row {{ height: 3; }}
{cls} .fd-row Label {{ width: 8; padding-top: 1; }}
{cls} .fd-row Input {{ width: 1fr; }}
{cls} .fd-hint {{ height: auto; color: $text-muted; }}
{cls} .fd-buttons {{ height: 3; align-horizontal: right; }}
{cls} .fd-buttons Button {{ margin-left: 1; }}
"""


class _PathsDialog(Dialog["object"]):
    """Labelled path fields, a hint, the primary button and Cancel; subclasses say what they dismiss with."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel", id="formats.cancel")]
    TITLE_TEXT = ""
    OK = "OK"
    #: (field id, label) of each path field, in order.
    FIELDS: ClassVar[list[tuple[str, str]]] = []

    def __init__(self, values: dict[str, str], hint: str, folder: Path) -> None:
        super().__init__()
        self.values, self.hint, self.folder = values, hint, folder

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self.TITLE_TEXT, style="bold"), classes="fd-title")
            for field, label in self.FIELDS:
                with Horizontal(classes="fd-row"):
                    yield Label(label)
                    yield Input(self.values.get(field, ""), id=field)
            yield Static(Text(self.hint), classes="fd-hint")
            with Horizontal(classes="fd-buttons"):
                yield Button(self.OK, variant="primary", id="fd-ok")
                yield Button("Cancel", id="fd-cancel")

    def on_mount(self) -> None:
        first = next((f for f, _ in self.FIELDS if not self.values.get(f)), self.FIELDS[0][0])
        self.query_one(f"#{first}", Input).focus()

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#fd-cancel")
    def _cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#fd-ok")
    @on(Input.Submitted)
    def confirm(self) -> None:
        paths: dict[str, Path] = {}
        for field, label in self.FIELDS:
            text = self.query_one(f"#{field}", Input).value
            if not text.strip():
                self.notify(f"give the {label.lower().rstrip(':')} path", title="missing path", severity="error")
                self.query_one(f"#{field}", Input).focus()
                return
            paths[field] = absolute(text, self.folder)
        self.dismiss(self.result(paths))

    def result(self, paths: dict[str, Path]) -> object:
        raise NotImplementedError


class ExportEnvDialog(_PathsDialog):
    """The folder a verifiers package of ``env`` is written to (new or empty)."""

    DEFAULT_CSS = _CSS.format(cls="ExportEnvDialog")
    OK = "Export"
    FIELDS: ClassVar[list[tuple[str, str]]] = [("fd-out", "Folder:")]

    def __init__(self, env: str, default: Path) -> None:
        self.TITLE_TEXT = f"Export {env} as a verifiers package"
        super().__init__({"fd-out": str(default)}, f"a new or empty folder; a relative path goes in "
                         f"{fpath(default.parent)}; enter exports, escape cancels", default.parent)

    def result(self, paths: dict[str, Path]) -> Path:
        return paths["fd-out"]


@dataclass(frozen=True)
class EvalFiles:
    """The files of an OpenAI eval and the environment folder to write."""

    eval_file: Path
    run_file: Path
    data_file: Path
    out: Path


class ImportEvalDialog(_PathsDialog):
    """EVAL.json, RUN.json, DATA.jsonl and the environment folder to write (absent or empty)."""

    DEFAULT_CSS = _CSS.format(cls="ImportEvalDialog")
    TITLE_TEXT = "Import an OpenAI eval as an environment"
    OK = "Import"
    FIELDS: ClassVar[list[tuple[str, str]]] = [("fd-eval", "Eval:"), ("fd-run", "Run:"), ("fd-data", "Data:"),
                                               ("fd-out", "Into:")]

    def __init__(self, envs_folder: Path, cwd: Path) -> None:
        super().__init__({"fd-out": fpath(envs_folder) + "/"},
                         "Eval: the eval object (JSON), Run: one of its runs (JSON), Data: its items (JSONL); "
                         f"Into: the environment folder, in {fpath(envs_folder)} to list it here. "
                         "Relative paths start in the working folder", cwd)

    def result(self, paths: dict[str, Path]) -> EvalFiles:
        return EvalFiles(paths["fd-eval"], paths["fd-run"], paths["fd-data"], paths["fd-out"])


class ImportTrajectoriesDialog(_PathsDialog):
    """The Harbor ATIF trajectories to import as a run: a trajectory file, a trial folder or a job folder."""

    DEFAULT_CSS = _CSS.format(cls="ImportTrajectoriesDialog")
    TITLE_TEXT = "Import Harbor ATIF trajectories as a run"
    OK = "Import"
    FIELDS: ClassVar[list[tuple[str, str]]] = [("fd-from", "From:")]

    def __init__(self, cwd: Path) -> None:
        super().__init__({}, "a trajectory .json, a trial folder or a Harbor job folder; a relative path starts "
                         "in the working folder; enter imports, escape cancels", cwd)

    def result(self, paths: dict[str, Path]) -> Path:
        return paths["fd-from"]
