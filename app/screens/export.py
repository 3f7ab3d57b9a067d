"""Export (``x`` on Traces): where to write the rollouts the filters select, and as what, asked in a small
dialog: JSONL (one file) or Harbor ATIF trajectories (a new or empty folder, one trial folder per rollout,
``workbench export --format atif``); the format button switches between them.

The path starts in the export folder (the settings' ``export_dir`` when the user set one, else
``<XDG data>/workbench/exports``), never wherever the app happened to be started. A bare file name
goes in that folder. Enter (or Export) dismisses with the checked path and the format; escape cancels. A
path that cannot be written — a folder for JSONL, a file or a folder not empty for ATIF, a parent that
cannot be created — is one notification, and the dialog stays open for another path: nothing is written.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Static
from workbench_app.format import fpath
from workbench_app.screens.dialog import Dialog

from workbench.config import paths

if TYPE_CHECKING:
    from workbench.config.settings import Settings


def export_folder(settings: Settings) -> Path:
    """Where exports go: the settings' ``export_dir`` if the user set it (file or WORKBENCH_EXPORT_DIR),
    else the user's data folder (the settings' own default, the working directory, is not a place)."""
    if "export_dir" in settings.model_fields_set:
        return Path(settings.export_dir).expanduser()
    return paths.data_dir() / "exports"


def default_export_path(settings: Settings) -> Path:
    return export_folder(settings) / f"rollouts-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"


#: Each format: its button's label and the dialog's title.
FORMATS = {"jsonl": ("as JSONL", "Export rollouts as JSONL"),
           "atif": ("as ATIF", "Export rollouts as Harbor ATIF trajectories")}


@dataclass(frozen=True)
class ExportTarget:
    """Where the export goes, and as what: ``jsonl`` (a file) or ``atif`` (a folder)."""

    path: Path
    fmt: str = "jsonl"


def default_atif_folder(default: Path) -> Path:
    """The folder an ATIF export of the JSONL export ``default`` is offered: its name without ``.jsonl``."""
    return default.with_name(default.stem + "-atif")


def _writable_parent(path: Path) -> None:
    """Create ``path``'s parent folders; ValueError says, in one line, why they cannot be written."""
    parent = path.parent
    blocking = next((p for p in (parent, *parent.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise ValueError(f"cannot create the folder {parent}: {blocking} is a file; give another path")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"cannot create the folder {parent} ({e.strerror or e}); give another path") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write in {parent} (permission denied); give another path")


def check_atif_folder(text: str, folder: Path) -> Path:
    """The new or empty folder an ATIF export fills for what was typed (relative: in ``folder``), its parent
    folders created; ValueError says, in one line, why it cannot be that folder."""
    raw = text.strip()
    if not raw:
        raise ValueError("give the folder to export to, e.g. " + str(folder / "trajectories"))
    path = Path(raw).expanduser()
    path = (path if path.is_absolute() else folder / path).absolute()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} is a file; ATIF is a folder of trajectories: give a new or empty folder")
    if path.is_dir() and any(path.iterdir()):
        raise ValueError(f"{path} is not empty; give a new or empty folder")
    _writable_parent(path)
    return path


def check_export_path(text: str, folder: Path) -> Path:
    """The file to write for what was typed (relative: in ``folder``), its parent folders created;
    ValueError says, in one line, why it cannot be written there."""
    raw = text.strip()
    if not raw:
        raise ValueError("give the file to export to, e.g. " + str(folder / "rollouts.jsonl"))
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = folder / path
    path = path.absolute()  # said in full when it is written
    if path.is_dir():
        raise ValueError(f"{path} is a folder; give a file name in it, e.g. {path / 'rollouts.jsonl'}")
    if path.exists() and not path.is_file():
        raise ValueError(f"{path} exists and is not a regular file; give another file name")
    _writable_parent(path)
    return path


class ExportScreen(Dialog["ExportTarget | None"]):
    """The export path (editable), what is exported, the format, Export / Cancel."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="export.cancel"),
    ]
    DEFAULT_CSS = """
    ExportScreen { align: center middle; }
    #export-box { width: 90; max-width: 95%; height: auto; border: thick $primary; background: $surface;
                  padding: 0 1; }
    #export-title { height: auto; margin-bottom: 1; }
    #export-path { width: 1fr; }
    #export-hint { height: auto; color: $text-muted; }
    #export-buttons { height: 3; align-horizontal: right; }
    #export-buttons Button { margin-left: 1; }
    """

    def __init__(self, default: Path, what: str = "") -> None:
        """``default``: the path offered; ``what``: what the filters select (shown in the title)."""
        super().__init__()
        self.default = default
        self.what = what
        self.fmt = "jsonl"

    def compose(self) -> ComposeResult:
        with Vertical(id="export-box"):
            yield Static(self._title(), id="export-title")
            yield Input(str(self.default), id="export-path")
            yield Static(f"a name alone goes in {fpath(self.default.parent)}; enter exports, escape cancels",
                         id="export-hint")
            with Horizontal(id="export-buttons"):
                yield Button(FORMATS[self.fmt][0], id="export-format")
                yield Button("Export", variant="primary", id="export-ok")
                yield Button("Cancel", id="export-cancel")

    def on_mount(self) -> None:
        self.query_one("#export-path", Input).focus()

    def _title(self) -> Text:
        title = Text(FORMATS[self.fmt][1], style="bold")
        if self.what:
            title.append(f"  {self.what}", style="dim")
        return title

    def _defaults(self) -> dict[str, Path]:
        return {"jsonl": self.default, "atif": default_atif_folder(self.default)}

    @on(Button.Pressed, "#export-format")
    def switch_format(self) -> None:
        """JSONL ⇄ ATIF; a path still the other format's default becomes this one's."""
        field = self.query_one("#export-path", Input)
        defaults = self._defaults()
        was_default = field.value == str(defaults[self.fmt])
        self.fmt = "atif" if self.fmt == "jsonl" else "jsonl"
        if was_default:
            field.value = str(defaults[self.fmt])
        self.query_one("#export-format", Button).label = FORMATS[self.fmt][0]
        self.query_one("#export-title", Static).update(self._title())

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#export-cancel")
    def _cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#export-ok")
    @on(Input.Submitted, "#export-path")
    def confirm(self) -> None:
        check = check_atif_folder if self.fmt == "atif" else check_export_path
        try:
            path = check(self.query_one("#export-path", Input).value, self.default.parent)
        except ValueError as e:
            self.notify(str(e), title="cannot export there", severity="error", timeout=8)
            return
        self.dismiss(ExportTarget(path, self.fmt))
