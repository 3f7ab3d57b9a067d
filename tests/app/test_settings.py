"""The Settings screen: models added, tested and removed through the use cases the CLI calls, the model each use
calls, the budget (live on Costs), the user name, the hub indexes; bad values are one line; a key is never shown."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Button, Input, Select, Static
from workbench_app.main import WorkbenchApp
from workbench_app.screens.costs import CostsScreen
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.screens.hub import HubScreen
from workbench_app.screens.models import ModelsPanel
from workbench_app.screens.settings import SettingsScreen
from workbench_app.widgets.tables import RowTable

from tests.app.conftest import screen_text, wait_until
from tests.helpers import MockServer
from workbench.config.models import load_models
from workbench.config.settings import load_settings, settings_path

BIG = (140, 45)
SECRET = "sk-test-5ecret-never-shown-0123456789"
KEY_VAR = "SETTINGS_TEST_API_KEY"


def _settings(app: WorkbenchApp) -> SettingsScreen:
    assert isinstance(app.screen, SettingsScreen)
    return app.screen


def _status(app: WorkbenchApp, id_: str) -> str:
    return str(app.screen.query_one(f"#{id_}", Static).render())


def _fill(app: WorkbenchApp, **values: str) -> None:
    for id_, value in values.items():
        app.screen.query_one(f"#{id_.replace('_', '-')}", Input).value = value


async def _submit(pilot: Any, app: WorkbenchApp, id_: str, value: str) -> None:
    field = app.screen.query_one(f"#{id_}", Input)
    field.value = value
    field.focus()
    await pilot.press("enter")


async def _add_model(pilot: Any, app: WorkbenchApp, name: str, url: str, **more: str) -> str:
    _fill(app, model_name=name, model_url=url, **more)
    app.screen.query_one("#model-add", Button).press()
    return str(await wait_until(pilot, lambda: _status(app, "models-status").strip(), what="the add's answer"))


async def test_models_are_added_tested_and_removed(make_app: Callable[..., WorkbenchApp],
                                                   mock_server: Callable[..., MockServer], closed_port: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    server = mock_server("instant", require_key=SECRET)
    monkeypatch.setenv(KEY_VAR, SECRET)
    app = make_app(mode="settings")
    async with app.run_test(size=BIG) as pilot:
        table = _settings(app).query_one("#models-table", RowTable)
        said = await _add_model(pilot, app, "mock", server.base_url, model_id="mock-model", model_key_env=KEY_VAR)
        assert said.startswith("registered mock: mock-model at"), said
        assert table.row_count == 1 and load_models()["mock"].api_key_env == KEY_VAR
        await wait_until(pilot, lambda: f"${KEY_VAR} (set)" in screen_text(app), what="where its key comes from")

        panel = app.screen.query_one(ModelsPanel)
        panel.action_test()
        ok = await wait_until(pilot, lambda: "answered in" in _status(app, "models-status")
                              and _status(app, "models-status"), timeout=30, what="the test to pass")
        assert ok.startswith("mock: ok, mock-model at") and "\n" not in ok

        _fill(app, model_name="gone")  # enter in a field adds too
        await _submit(pilot, app, "model-url", f"http://127.0.0.1:{closed_port}/v1")
        await wait_until(pilot, lambda: table.row_count == 2, what="the second model listed")
        table.move_cursor(row=table.get_row_index("gone"))
        panel.action_test()
        failed = await wait_until(pilot, lambda: "cannot be called" in _status(app, "models-status")
                                  and _status(app, "models-status"), timeout=30, what="the test to fail")
        assert failed.startswith("gone: cannot be called (cannot connect to") and "Traceback" not in failed

        app.screen.query_one("#model-remove", Button).press()
        await wait_until(pilot, lambda: table.row_count == 1, what="the model removed")
        assert list(load_models()) == ["mock"] and _status(app, "models-status") == "removed gone"
        assert SECRET not in screen_text(app)


@pytest.mark.parametrize(("name", "url", "said"), [
    ("bad-url", "ftp://example.com/v1", "must be an http:// or https:// URL"),
    ("", "http://127.0.0.1:8000/v1", "a model needs a name and a base URL"),
    ("has space", "http://127.0.0.1:8000/v1", "model 'has space': name: use letters, digits"),
    ("keyed", "https://user:pw@example.com/v1", "holds a credential"),
])
async def test_a_bad_model_is_one_line(make_app: Callable[..., WorkbenchApp], name: str, url: str,
                                       said: str) -> None:
    app = make_app(mode="settings")
    async with app.run_test(size=BIG) as pilot:
        line = await _add_model(pilot, app, name, url)
        assert said in line and "\n" not in line and "Traceback" not in line, line
        assert load_models() == {} and "pw@" not in screen_text(app)


async def test_the_quick_eval_calls_the_chosen_model_and_says_so(make_app: Callable[..., WorkbenchApp],
                                                                  arith_server: MockServer) -> None:
    app = make_app(mode="settings", quick_eval_n=2)  # no model / base_url: only the choice names one
    async with app.run_test(size=BIG) as pilot:
        await _add_model(pilot, app, "arith", arith_server.base_url, model_id="mock-model")
        select = app.screen.query_one("#use-quick_eval", Select)
        await wait_until(pilot, lambda: len(select._options) > 1, what="the model among the choices")
        select.value = "arith"
        await wait_until(pilot, lambda: "the quick eval calls arith" in _status(app, "uses-status"),
                         what="the choice saved")
        assert load_settings().models.quick_eval == "arith" and app.config.endpoint_for("quick_eval") == ("arith", None)

        await pilot.press("1")
        await wait_until(pilot, lambda: isinstance(app.screen, EnvironmentsScreen) and "adder" in app.screen.envs
                         and app.screen.envs["adder"].status == "ok", what="adder loaded")
        await pilot.press("e")
        done = await wait_until(pilot, lambda: [n.message for n in app._notifications
                                                if n.title in ("quick eval done", "quick eval failed")],
                                timeout=60, what="the quick eval to end")
        assert done[0].startswith("adder with arith run "), done


async def test_the_budget_shows_on_costs_without_a_restart(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(mode="costs")
    async with app.run_test(size=BIG) as pilot:
        costs = app.screen
        assert isinstance(costs, CostsScreen)
        await wait_until(pilot, lambda: "set [budget] monthly_usd" in screen_text(app), what="no budget")

        await pilot.press("6")
        await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen), what="Settings")
        for bad, said in (("-5", "budget.monthly_usd must be a non-negative number, got -5.0"),
                          ("lots", "budget.monthly_usd must be a number of USD, e.g. 50, got 'lots'")):
            await _submit(pilot, app, "budget", bad)
            await wait_until(pilot, lambda s=said: _status(app, "budget-status") == s, what=f"the error {said!r}")
        assert load_settings().monthly_budget_usd is None
        settings_path().parent.mkdir(parents=True, exist_ok=True)
        settings_path().write_text("[budget]\nmonthly_usd = -1\n")  # a bad value in the file: said on top
        await pilot.press("escape", "r")
        await wait_until(pilot, lambda: "budget.monthly_usd must be a non-negative number, got -1"
                         in _status(app, "settings-file"), what="the file's problem")
        await _submit(pilot, app, "budget", "7")
        await wait_until(pilot, lambda: "monthly budget: $7" in _status(app, "budget-status"), what="saved")

        await pilot.press("escape", "4")  # out of the field: 4 is a key again, not a digit
        await wait_until(pilot, lambda: "of $7.00" in screen_text(app), what="Costs showing the new budget")
        settings_path().write_text("[budget]\nmonthly_usd = 9.5\n")  # the file changed elsewhere
        costs.action_refresh()  # what its poll does
        await wait_until(pilot, lambda: "of $9.50" in screen_text(app), what="Costs reading the file")


async def test_the_user_name_is_stored_for_plays(make_app: Callable[..., WorkbenchApp]) -> None:
    from workbench.runs.play_session import person_name

    app = make_app(mode="settings")
    async with app.run_test(size=BIG) as pilot:
        await _submit(pilot, app, "user-name", "Ada Lovelace")
        await wait_until(pilot, lambda: "plays are stored as Ada Lovelace" in _status(app, "user-name-status"),
                         what="the name saved")
        assert person_name() == "Ada Lovelace"
        await _submit(pilot, app, "user-name", "bad\x1bname")
        await wait_until(pilot, lambda: "one printable line" in _status(app, "user-name-status"), what="refused")
        assert person_name() == "Ada Lovelace"


async def test_hub_without_an_index_leads_to_settings(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, EnvironmentsScreen) and app.screen.envs,
                         what="the environments")
        await pilot.press("H")
        await wait_until(pilot, lambda: "No package index is configured" in screen_text(app), what="the offer")
        assert isinstance(app.screen, HubScreen) and "--index" not in screen_text(app)
        await pilot.press("s")
        await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen)
                         and app.focused is app.screen.query_one("#index-name"), what="Settings on a new index")

        _fill(app, index_name="company", index_url="ftp://pypi.example/simple/")
        app.screen.query_one("#index-add", Button).press()
        await wait_until(pilot, lambda: "must be an http(s) URL" in _status(app, "hub-status"), what="the error")
        await _submit(pilot, app, "index-url", "https://pypi.example/simple/")
        await wait_until(pilot, lambda: "added index company" in _status(app, "hub-status"), what="the index added")
        hub = load_settings().hub
        assert hub.default == "company" and hub.indexes["company"].url == "https://pypi.example/simple/"
        assert app.config.hub.default == "company"


@pytest.mark.parametrize(("query", "hit"), [("settings", "Go to Settings"),
                                            ("model", "Models: add, remove or test a model")])
async def test_the_palette_finds_settings(make_app: Callable[..., WorkbenchApp], query: str, hit: str) -> None:
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("ctrl+p")
        await pilot.press(*query)
        await wait_until(pilot, lambda: hit in screen_text(app), what=f"the palette hit {hit!r}")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen), what="Settings")


def _snapshot_settings(path: Path) -> None:
    from workbench.config.models import add_model

    add_model("gpt-small", base_url="https://api.example.com/v1", model_id="gpt-small-2025", api_key_env=KEY_VAR)
    add_model("local-qwen", base_url="http://127.0.0.1:8000/v1", model_id="Qwen/Qwen3-0.6B")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('user_name = "ada"\n[models]\nquick_eval = "gpt-small"\n[budget]\nmonthly_usd = 50.0\n'
                    '[hub]\ndefault = "company"\n[hub.indexes.company]\nurl = "https://pypi.example/simple/"\n')


@pytest.mark.slow
@pytest.mark.parametrize("size", [(80, 24), BIG], ids=["80x24", "140x45"])
def test_settings_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp], tmp_path: Path,
                           monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(KEY_VAR, SECRET)
    _snapshot_settings(settings_path())

    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen)
                         and app.screen.query_one("#models-table", RowTable).row_count == 2, what="the models")
        await pilot.pause()
        assert SECRET not in screen_text(app)
        app.clear_notifications()
        await pilot.pause()

    assert snap_compare(make_app(mode="settings"), terminal_size=size, run_before=run_before)
    for svg in (Path(__file__).parent / "__snapshots__" / "test_settings").glob("*.svg"):
        assert SECRET not in svg.read_text()
    settings = tomllib.loads(settings_path().read_text())
    assert SECRET not in str(settings) and SECRET not in (settings_path().parent / "models.json").read_text()


async def test_the_debugger_calls_the_model_chosen_for_it(make_app: Callable[..., WorkbenchApp],
                                                          arith_server: MockServer, closed_port: int) -> None:
    from workbench_app.screens.debugger import DebuggerScreen

    from workbench.config.models import add_model

    add_model("arith", base_url=arith_server.base_url, model_id="mock-model")
    # the default endpoint cannot be reached: only the chosen model can answer
    app = make_app(mode="settings", base_url=f"http://127.0.0.1:{closed_port}/v1", model="mock-model")
    async with app.run_test(size=BIG) as pilot:
        select = app.screen.query_one("#use-debugger", Select)
        await wait_until(pilot, lambda: len(select._options) > 1, what="the model among the choices")
        select.value = "arith"
        await wait_until(pilot, lambda: "the Debugger calls arith" in _status(app, "uses-status"), what="saved")
        before = arith_server.requests()
        app.open_debugger(env_spec="arithmetic")
        dbg = await wait_until(pilot, lambda: isinstance(app.screen, DebuggerScreen) and app.screen.query("#dbg-env")
                               and app.screen, what="the Debugger")
        await wait_until(pilot, lambda: dbg.query_one("#dbg-env", Select).value == "arithmetic", what="the env")
        await pilot.press("n")
        await wait_until(pilot, lambda: dbg.session is not None and len(dbg.session.turns) == 1 and not dbg.busy,
                         timeout=30, what="a turn from the chosen model")
        assert arith_server.requests() > before
        assert [n.message for n in app._notifications if n.severity == "error"] == []
