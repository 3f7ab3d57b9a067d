"""The palette's "Import Harbor ATIF trajectories as a run": the fixture store's run exported as a Harbor job
(``workbench export --format atif``) comes back as a new imported run, listed by the Runs screen at once; a
path that holds no trajectories is one notification and makes no run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input
from workbench_app.main import WorkbenchApp
from workbench_app.screens.format_dialogs import ImportTrajectoriesDialog

from tests.app.conftest import SIZE, screen_text, wait_until
from workbench.analysis.export import run_filter
from workbench.analysis.export_atif import export_atif
from workbench.store import Store
from workbench.store.run_listing import list_runs


def _runs(store_file: Path) -> list[dict[str, Any]]:
    store = Store(store_file)
    try:
        return list_runs(store.conn, limit=100, kinds=None)
    finally:
        store.close()


@pytest.fixture
def harbor_job(store_file: Path, tmp_path: Path) -> Path:
    """The fixture store's run 1114-aaaaaa (12 rollouts, one of them a timeout), as a Harbor job of ATIF trials."""
    store = Store(store_file)
    try:
        export_atif(store, run_filter("1114-aaaaaa", include_errors=True), tmp_path / "job")
    finally:
        store.close()
    return tmp_path / "job"


async def _import(pilot: Any, path: Path) -> list[Any]:
    app = pilot.app
    await pilot.press("ctrl+p")
    await pilot.press(*"import harbor")
    await wait_until(pilot, lambda: "Import Harbor ATIF trajectories" in screen_text(app), what="the palette hit")
    await pilot.press("enter")
    dialog = await wait_until(pilot, lambda: isinstance(app.screen, ImportTrajectoriesDialog) and app.screen,
                              what="the import dialog")
    field = await wait_until(pilot, lambda: dialog.query("#fd-from") and dialog.query_one("#fd-from", Input),
                             what="its path field")
    field.value = str(path)
    app.clear_notifications()
    await pilot.press("enter")
    return await wait_until(pilot, lambda: [n for n in app._notifications if n.title in ("imported", "import refused")],
                            timeout=30, what="the import's answer")


async def test_a_harbor_job_comes_back_as_an_imported_run(make_app: Callable[..., WorkbenchApp], store_file: Path,
                                                          harbor_job: Path) -> None:
    before = {r["id"] for r in _runs(store_file)}
    app = make_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        notes = await _import(pilot, harbor_job)
        assert [n.title for n in notes] == ["imported"], [n.message for n in notes]
        new = [r for r in _runs(store_file) if r["id"] not in before]
        assert len(new) == 1 and new[0]["kind"] == "import", new
        # the rollout that timed out has no assistant turn: skipped, and said so
        assert notes[0].message.startswith(f"imported 11 trajectories from {harbor_job} as run {new[0]['id']}")
        assert "skipped 1 (first: " in notes[0].message and "no assistant turn" in notes[0].message
        await wait_until(pilot, lambda: new[0]["id"] in screen_text(app), what="the new run in Runs")


def _not_trajectories(tmp_path: Path) -> Path:
    (tmp_path / "notes.json").write_text('{"hello": "world"}')
    return tmp_path / "notes.json"


def _empty_folder(tmp_path: Path) -> Path:
    (tmp_path / "nothing").mkdir()
    return tmp_path / "nothing"


#: (case, the path made in tmp_path, a fragment of the one line)
BAD = [
    ("missing", lambda t: t / "absent", "absent"),
    ("not a trajectory", _not_trajectories, "notes.json"),
    ("no trajectories in the folder", _empty_folder, "nothing"),
]


@pytest.mark.parametrize(("case", "make", "says"), BAD, ids=[c[0] for c in BAD])
async def test_a_path_without_trajectories_is_one_notification_and_no_run(
        make_app: Callable[..., WorkbenchApp], store_file: Path, tmp_path: Path, case: str,
        make: Callable[[Path], Path], says: str) -> None:
    path = make(tmp_path)
    before = _runs(store_file)
    app = make_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        notes = await _import(pilot, path)
        assert len(notes) == 1 and notes[0].title == "import refused" and notes[0].severity == "error"
        assert says in notes[0].message and "\n" not in notes[0].message, notes[0].message
    assert _runs(store_file) == before
