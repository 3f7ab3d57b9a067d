"""Export (``x`` on Traces): where to write the rollouts the filters select, asked in a small dialog.

The path starts in the export folder (the settings' ``export_dir`` when the user set one, else
``<XDG data>/workbench/exports``), never wherever the app happened to be started. A bare file name
goes in that folder. Enter (or Export) dismisses with the checked path; escape cancels. A path that
cannot be written — a folder, a parent that cannot be created — is one notification, and the dialog
stays open for another path: nothing is written.
"""

from __future__ import annotations

import os
import time
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
    return path


class ExportScreen(Dialog["Path | None"]):
    """The export path (editable), what is exported, Export / Cancel."""

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

    def compose(self) -> ComposeResult:
        with Vertical(id="export-box"):
            title = Text("Export rollouts as JSONL", style="bold")
            if self.what:
                title.append(f"  {self.what}", style="dim")
            yield Static(title, id="export-title")
            yield Input(str(self.default), id="export-path")
            yield Static(f"a file name alone goes in {fpath(self.default.parent)}; enter exports, escape cancels",
                         id="export-hint")
            with Horizontal(id="export-buttons"):
                yield Button("Export", variant="primary", id="export-ok")
                yield Button("Cancel", id="export-cancel")

    def on_mount(self) -> None:
        self.query_one("#export-path", Input).focus()

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#export-cancel")
    def _cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#export-ok")
    @on(Input.Submitted, "#export-path")
    def confirm(self) -> None:
        try:
            path = check_export_path(self.query_one("#export-path", Input).value, self.default.parent)
        except ValueError as e:
            self.notify(str(e), title="cannot export there", severity="error", timeout=8)
            return
        self.dismiss(path)
