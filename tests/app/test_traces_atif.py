"""``x`` on Traces, as ATIF: the format button switches the export to Harbor ATIF trajectories, one trial
folder per rollout the filters select, which ``workbench import --format atif`` reads back. A path that
cannot be that folder is one notification, the dialog stays open, and nothing is written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Button, Input
from workbench_app.main import WorkbenchApp
from workbench_app.screens.export import ExportScreen

from tests.app.conftest import SIZE, wait_until
from tests.app.test_traces import _export_note, _settled, _type
from workbench.runs.import_atif import read_atif


async def _atif_dialog(pilot: Any) -> ExportScreen:
    app = pilot.app
    await pilot.press("escape", "x")
    dialog: ExportScreen = await wait_until(pilot, lambda: isinstance(app.screen, ExportScreen) and app.screen,
                                            what="the export dialog")
    await wait_until(pilot, lambda: dialog.query("#export-format"), what="the format button")
    offered = dialog.query_one("#export-path", Input).value
    await pilot.click("#export-format")
    await wait_until(pilot, lambda: dialog.fmt == "atif", what="the ATIF format")
    assert str(dialog.query_one("#export-format", Button).label) == "as ATIF"
    field = dialog.query_one("#export-path", Input)
    assert field.value == offered.removesuffix(".jsonl") + "-atif"
    field.focus()
    return dialog


async def test_x_exports_the_filtered_rollouts_as_atif_trials(make_app: Callable[..., WorkbenchApp],
                                                             tmp_path: Path) -> None:
    out = tmp_path / "harbor-job"
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _settled(pilot, app, 24)
        await _type(pilot, app, "f-run", "1114-aaaaaa")
        await _settled(pilot, app, 12)
        dialog = await _atif_dialog(pilot)
        dialog.query_one("#export-path", Input).value = str(out)
        await pilot.press("enter")
        note = await wait_until(pilot, lambda: _export_note(app), timeout=30, what="the export")
    assert note.message == f"exported 12 rollouts as ATIF trajectories (one trial folder each) to {out}"
    trials = sorted(p.name for p in out.iterdir())
    assert trials == sorted(f"1114-aaaaaa.{i}.0" for i in range(12))
    doc = json.loads((out / "1114-aaaaaa.2.0" / "agent" / "trajectory.json").read_text())
    assert doc["session_id"] == "1114-aaaaaa.2.0"
    _, rows = read_atif(out)
    assert len(list(rows)) == 12


def _full(tmp_path: Path) -> Path:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    return tmp_path / "full"


def _a_file(tmp_path: Path) -> Path:
    (tmp_path / "a-file").write_text("mine")
    return tmp_path / "a-file"


#: (case, the path made in tmp_path, a fragment of the one line)
BAD = [
    ("folder not empty", _full, "is not empty"),
    ("a file", _a_file, "is a file"),
    ("under a file", lambda t: _a_file(t) / "job", "a-file is a file"),
]


@pytest.mark.parametrize(("case", "make", "says"), BAD, ids=[c[0] for c in BAD])
async def test_a_path_that_cannot_be_the_folder_is_one_notification(
        make_app: Callable[..., WorkbenchApp], tmp_path: Path, case: str, make: Callable[[Path], Path],
        says: str) -> None:
    bad = make(tmp_path)
    before = sorted(str(p) for p in tmp_path.rglob("*") if "xdg-" not in str(p) and "store" not in p.parts)
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _settled(pilot, app, 24)
        dialog = await _atif_dialog(pilot)
        dialog.query_one("#export-path", Input).value = str(bad)
        app.clear_notifications()
        await pilot.press("enter")
        notes = await wait_until(pilot, lambda: [n for n in app._notifications if n.severity == "error"],
                                 what="the error")
        assert len(notes) == 1 and notes[0].title == "cannot export there" and says in notes[0].message
        assert app.screen is dialog and _export_note(app) is None
    assert sorted(str(p) for p in tmp_path.rglob("*") if "xdg-" not in str(p) and "store" not in p.parts) == before
