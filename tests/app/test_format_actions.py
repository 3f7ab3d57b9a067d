"""The format actions of the Environments screen, end to end on real files: ``x`` exports the selected
environment as a verifiers package; the palette's "Import an OpenAI eval" writes an environment folder, listed
at once when it is in a user environment folder. A bad input ends in one notification, nothing written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input
from workbench_app.main import WorkbenchApp
from workbench_app.screens.format_dialogs import ExportEnvDialog, ImportEvalDialog

from tests.app.conftest import envs_ready, screen_text, wait_until
from tests.formats.test_openai_evals_import import EVAL, RUN, write_definition
from workbench.authoring import discovery
from workbench.authoring.discovery import EnvRef

SMALL = (80, 24)
#: The eval with its string and similarity graders only: no judge model to register.
PLAIN_EVAL = {**EVAL, "testing_criteria": EVAL["testing_criteria"][:3]}


@pytest.fixture
def user_envs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "user-envs"
    d.mkdir()
    monkeypatch.setenv("WORKBENCH_ENV_PATH", str(d))
    return d


@pytest.fixture
def app_with(make_app: Callable[..., WorkbenchApp], user_envs: Path) -> Callable[..., WorkbenchApp]:
    """An app listing the bundled ``names`` and every environment folder in the user environment folder."""

    def make(*names: str) -> WorkbenchApp:
        app = make_app()
        bundled = [discovery.resolve(n) for n in names]
        app.discover_fn = lambda: bundled + [EnvRef(p.name, "user", p) for p in sorted(user_envs.iterdir())
                                             if p.is_dir()]
        return app

    return make


def _notes(app: WorkbenchApp) -> list[Any]:
    return list(app._notifications)  # noqa: SLF001


async def _select(pilot: Any, name: str) -> None:
    screen = pilot.app.screen
    screen.catalog.select(screen.envs[name])
    await wait_until(pilot, lambda: screen._selected() is screen.envs[name], what=f"{name} selected")


async def _export(app_with: Callable[..., WorkbenchApp], env: str, out: Path) -> list[Any]:
    """Press x on ``env``, type ``out``, enter; the notifications once the export has answered."""
    app = app_with(env)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_until(pilot, lambda: envs_ready(app), timeout=30, what="the environments")
        await _select(pilot, env)
        await pilot.press("x")
        await wait_until(pilot, lambda: isinstance(app.screen, ExportEnvDialog) and app.screen.query("#fd-out"),
                         what="the export dialog")
        app.screen.query_one("#fd-out", Input).value = str(out)
        app.clear_notifications()
        await pilot.press("enter")
        return await wait_until(pilot, lambda: [n for n in _notes(app) if n.title in ("exported", "export refused")],
                                timeout=60, what="the export's answer")


async def test_x_exports_the_selected_environment_as_a_verifiers_package(
        app_with: Callable[..., WorkbenchApp], tmp_path: Path) -> None:
    out = tmp_path / "out" / "arith-pkg"
    notes = await _export(app_with, "arithmetic", out)
    assert [n.title for n in notes] == ["exported"], [n.message for n in notes]
    assert f"arithmetic exported to {out}" in notes[0].message and "vf-eval" in notes[0].message
    assert (out / "pyproject.toml").is_file()
    assert any(out.rglob("manifest.json")) or any(out.rglob("*.py"))


def _full_folder(tmp_path: Path) -> Path:
    d = tmp_path / "full"
    d.mkdir()
    (d / "keep.txt").write_text("mine")
    return d


def _a_file(tmp_path: Path) -> Path:
    f = tmp_path / "a-file"
    f.write_text("mine")
    return f


#: (case, environment, the output path made in tmp_path, a fragment of the one line)
EXPORT_REFUSALS = [
    ("folder not empty", "arithmetic", _full_folder, "not an empty folder"),
    ("a file, not a folder", "arithmetic", _a_file, "a-file"),
    ("simulated user", "support_desk", lambda t: t / "desk-pkg", "wb.UserSim"),
]


@pytest.mark.parametrize(("case", "env", "make_out", "says"), EXPORT_REFUSALS, ids=[c[0] for c in EXPORT_REFUSALS])
async def test_a_refused_export_is_one_notification_and_writes_nothing(
        app_with: Callable[..., WorkbenchApp], tmp_path: Path, case: str, env: str,
        make_out: Callable[[Path], Path], says: str) -> None:
    out = make_out(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    inside = sorted(p.name for p in out.iterdir()) if out.is_dir() else None
    notes = await _export(app_with, env, out)
    assert len(notes) == 1 and notes[0].title == "export refused" and notes[0].severity == "error"
    assert says in notes[0].message and "\n" not in notes[0].message
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (sorted(p.name for p in out.iterdir()) if out.is_dir() else None) == inside


async def _open_import(pilot: Any) -> ImportEvalDialog:
    app = pilot.app
    await wait_until(pilot, lambda: envs_ready(app), timeout=30, what="the environments")
    await pilot.press("ctrl+p")
    await pilot.press(*"import an openai")
    await wait_until(pilot, lambda: "Import an OpenAI eval" in screen_text(app), what="the palette hit")
    await pilot.press("enter")
    dialog = await wait_until(pilot, lambda: app.screen if isinstance(app.screen, ImportEvalDialog) else None,
                              what="the import dialog")
    await wait_until(pilot, lambda: dialog.query("#fd-out"), what="the import dialog's fields")
    return dialog


async def _import(pilot: Any, src: Path, out: Path) -> list[Any]:
    app = pilot.app
    dialog = await _open_import(pilot)
    for field, name in (("fd-eval", "eval.json"), ("fd-run", "run.json"), ("fd-data", "data.jsonl")):
        dialog.query_one(f"#{field}", Input).value = str(src / name)
    dialog.query_one("#fd-out", Input).value = str(out)
    app.clear_notifications()
    await pilot.press("enter")
    return await wait_until(pilot, lambda: [n for n in _notes(app) if n.title in ("imported", "import refused")],
                            timeout=60, what="the import's answer")


async def test_an_imported_eval_in_a_user_folder_is_listed_and_selected(
        app_with: Callable[..., WorkbenchApp], user_envs: Path, tmp_path: Path) -> None:
    src = write_definition(tmp_path / "src", PLAIN_EVAL, RUN)
    app = app_with("arithmetic")
    async with app.run_test(size=(120, 36)) as pilot:
        notes = await _import(pilot, src, user_envs / "capitals")
        assert [n.title for n in notes] == ["imported"], [n.message for n in notes]
        assert "4 tasks" in notes[0].message and "listed here as capitals" in notes[0].message
        screen = app.screen
        st = await wait_until(pilot, lambda: screen.envs.get("capitals"), what="capitals listed")
        await wait_until(pilot, lambda: screen._selected() is st, what="capitals selected")
        await wait_until(pilot, lambda: st.status == "ok", timeout=30, what="capitals loaded")
        assert st.tasks == 4


async def test_an_import_outside_the_user_folders_says_where_it_went(
        app_with: Callable[..., WorkbenchApp], tmp_path: Path) -> None:
    src = write_definition(tmp_path / "src", PLAIN_EVAL, RUN)
    out = tmp_path / "elsewhere" / "capitals"
    app = app_with("arithmetic")
    async with app.run_test(size=(120, 36)) as pilot:
        notes = await _import(pilot, src, out)
        assert [n.title for n in notes] == ["imported"]
        assert f"workbench eval {out}" in notes[0].message and "not listed here" in notes[0].message
        assert "capitals" not in app.screen.envs
    assert out.is_dir()


#: (case, what spoils the definition, a fragment of the one line)
IMPORT_REFUSALS = [
    ("not JSON", lambda src: (src / "eval.json").write_text("{not json"), "eval.json"),
    ("no items", lambda src: (src / "data.jsonl").write_text(""), "data.jsonl"),
    ("missing run", lambda src: (src / "run.json").unlink(), "run.json"),
]


@pytest.mark.parametrize(("case", "spoil", "says"), IMPORT_REFUSALS, ids=[c[0] for c in IMPORT_REFUSALS])
async def test_a_refused_import_is_one_notification_and_writes_nothing(
        app_with: Callable[..., WorkbenchApp], user_envs: Path, tmp_path: Path, case: str,
        spoil: Callable[[Path], Any], says: str) -> None:
    src = write_definition(tmp_path / "src", PLAIN_EVAL, RUN)
    spoil(src)
    app = app_with("arithmetic")
    async with app.run_test(size=(120, 36)) as pilot:
        notes = await _import(pilot, src, user_envs / "capitals")
        assert len(notes) == 1 and notes[0].title == "import refused" and notes[0].severity == "error"
        assert says in notes[0].message and "\n" not in notes[0].message
    assert list(user_envs.iterdir()) == []


async def test_an_empty_path_keeps_the_dialog_open(app_with: Callable[..., WorkbenchApp]) -> None:
    app = app_with("arithmetic")
    async with app.run_test(size=(120, 36)) as pilot:
        dialog = await _open_import(pilot)
        app.clear_notifications()
        await pilot.press("enter")
        note = await wait_until(pilot, lambda: _notes(app), what="the missing path")
        assert note[0].message == "give the eval path"
        assert app.screen is dialog and dialog.focused is dialog.query_one("#fd-eval", Input)


def test_import_eval_dialog_80x24_snapshot(snap_compare: Any, app_with: Callable[..., WorkbenchApp],
                                           monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)

    async def run_before(pilot: Any) -> None:
        await _open_import(pilot)
        pilot.app.clear_notifications()

    assert snap_compare(app_with("arithmetic"), terminal_size=SMALL, run_before=run_before)
