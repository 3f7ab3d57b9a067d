"""The Environments screen's Hub scope, driven by Pilot against a real pypiserver: the index's environments
and an eval card, pull with P, an update offered (never made) when a newer version is pushed and made with
U, a fork with F, and back to the Local scope."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Input
from workbench_app.main import WorkbenchApp
from workbench_app.screens.hub import HubScreen

from tests.app.conftest import screen_text, wait_until
from tests.helpers import cli_environment, run_workbench, write_file
from tests.package_index import PASSWORD, USER

pytest.importorskip("pypiserver")

# slow: Pilot against a real pypiserver: pushes, pulls, forks
pytestmark = pytest.mark.slow

ENV = '''
    """Count the letters of a word."""
    import workbench as wb


    def load_environment() -> wb.Environment:
        rows = [{"prompt": f"How many letters has {w!r}?", "answer": str(len(w))} for w in ("cat", "horse", "ox")]
        rubric = wb.Rubric()

        @rubric.reward
        def exact(completion: str, answer: str) -> float:
            """1 for the right count."""
            return float(completion.strip() == answer)

        return wb.Environment(name="letters", tasks=wb.TaskSet.from_records(rows), harness=wb.SingleTurn(),
                              rubric=rubric, description="Letter counts of short words.")
'''


def _settings(config_home: Path, url: str) -> None:
    write_file(config_home / "workbench" / "tui.toml", f'[hub]\ndefault = "team"\n[hub.indexes.team]\nurl = "{url}"\n')


def _published(tmp_path: Path, package_index: Callable[..., Any],
               monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, str]]:
    """``letters`` 0.1.0 pushed by another user to a fresh private index, which this app's settings name
    (its credentials in the environment): (the env's folder, the publisher's CLI environment)."""
    index = package_index(private=True)
    src = write_file(tmp_path / "src" / "letters" / "__init__.py", ENV).parent
    publisher = cli_environment(tmp_path / "publisher", tmp_path / "publisher.db", WORKBENCH_INDEX_USERNAME=USER,
                                WORKBENCH_INDEX_PASSWORD=PASSWORD)
    _settings(tmp_path / "publisher" / "xdg-config", index.simple)
    assert run_workbench(["hub", "push", src], publisher).rc == 0
    _settings(tmp_path / "xdg-config", index.simple)
    monkeypatch.setenv("WORKBENCH_INDEX_USERNAME", USER)
    monkeypatch.setenv("WORKBENCH_INDEX_PASSWORD", PASSWORD)
    return src, publisher


async def test_the_hub_scope_lists_pulls_updates_and_forks(make_app: Callable[..., WorkbenchApp], tmp_path: Path,
                                                         package_index: Callable[..., Any],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    src, publisher = _published(tmp_path, package_index, monkeypatch)

    app = make_app(mode="environments")
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("H")
        hub = await wait_until(pilot, lambda: isinstance(app.screen, HubScreen) and app.screen, what="the Hub scope")
        await wait_until(pilot, lambda: "reward design" in screen_text(app), what="the eval card")
        text = screen_text(app)
        assert "Local | Hub: team" in text and "letters" in text and "Letter counts of short words." in text
        assert "1 for the right count." in text

        await pilot.press("slash")
        hub.query_one("#hub-query", Input).value = "giraffes"
        await pilot.press("enter")
        await wait_until(pilot, lambda: "no environment on index team matching 'giraffes'" in screen_text(app),
                         what="an empty search")
        await pilot.press("slash")
        hub.query_one("#hub-query", Input).value = "letter counts"
        await pilot.press("enter")
        await wait_until(pilot, lambda: hub.query_one(DataTable).row_count == 1 and "reward design" in screen_text(app),
                         what="the search")

        await pilot.press("P")
        records = tmp_path / "xdg-data" / "workbench" / "hub" / "records" / "letters.json"
        await wait_until(pilot, records.is_file, what="the pull")
        table = hub.query_one("#hub-table", DataTable)
        await wait_until(pilot, lambda: str(table.get_cell("letters", "here")) == "0.1.0", what="the pulled version")

        write_file(src / "README.md", "# letters\n\nNow with a README.\n")
        assert run_workbench(["hub", "push", src], publisher).rc == 0
        await pilot.press("r")
        await wait_until(pilot, lambda: "(U: 0.1.1)" in str(table.get_cell("letters", "here")), what="the update offer")
        assert json.loads(records.read_text())["version"] == "0.1.0", "offered, never made silently"
        await pilot.press("U")
        await wait_until(pilot, lambda: json.loads(records.read_text())["version"] == "0.1.1", what="the update")
        await wait_until(pilot, lambda: str(table.get_cell("letters", "here")) == "0.1.1", what="the row")

        await pilot.press("F")
        await wait_until(pilot, lambda: app.screen.query("#fork-name"), what="the fork dialog")
        field = app.screen.query_one("#fork-name", Input)
        field.value = "letters_fork"
        await pilot.press("enter")
        fork = tmp_path / "xdg-data" / "workbench" / "envs" / "letters_fork" / "workbench.fork.json"
        await wait_until(pilot, fork.is_file, what="the fork")
        assert json.loads(fork.read_text())["version"] == "0.1.1"

        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, HubScreen), what="the Local scope")


def test_hub_scope_snapshot_80x24(snap_compare: Any, make_app: Callable[..., WorkbenchApp], tmp_path: Path,
                                  package_index: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    _published(tmp_path, package_index, monkeypatch)

    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await wait_until(pilot, lambda: app.screen.query("#env-table"), what="the Environments screen")
        await pilot.press("H")
        await wait_until(pilot, lambda: isinstance(app.screen, HubScreen) and "reward design" in screen_text(app),
                         what="the eval card")
        await pilot.pause(0.2)
        app.clear_notifications()
        await pilot.pause()

    monkeypatch.chdir(tmp_path)  # the header shows the store's path relative to here
    assert snap_compare(make_app(mode="environments"), terminal_size=(80, 24), run_before=run_before)
