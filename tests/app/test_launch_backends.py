"""The launch dialog offers the launch backends the registry lists: a backend a plugin registers
(an installed package's ``workbench.backends`` entry point) is offered beside the bundled ones, and its
own pre-flight is what the dialog shows and obeys."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from textual.widgets import Button, RadioButton
from workbench_app.main import WorkbenchApp
from workbench_app.screens.launch import LaunchScreen

from tests.app.conftest import SIZE, wait_until
from tests.app.test_launch_screen import Recorder, _fill, _make, _open_dialog, _plan_text
from tests.helpers import write_file

TOY_BACKEND = '''
class Forecast:
    def __init__(self, refusal):
        self.refusal = self.budget_problem = refusal


class ToyBackend:
    name = "toy"
    takes = "run"
    notice = ""
    label = "toy (a test plugin)"

    def preflight(self, conn, *, env, config_file=None, max_steps=None, budget_usd=None, overrides=None):
        return Forecast(f"toy refuses budgets over $5 (got ${budget_usd:g})" if (budget_usd or 0) > 5 else None)

    def check_credentials(self):
        pass

    def launch(self, store, run, plan=None, **kwargs):
        raise RuntimeError("the test never launches")


BACKEND = ToyBackend()
'''


@pytest.fixture
def toy_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package registering the launch backend ``toy``, installed on ``sys.path`` for this test."""
    from workbench import plugins

    site = tmp_path / "site"
    write_file(site / "wb_toy_backend" / "__init__.py", TOY_BACKEND)
    dist = site / "wb_toy_backend-0.1.dist-info"
    write_file(dist / "METADATA", "Metadata-Version: 2.1\nName: wb-toy-backend\nVersion: 0.1\n")
    write_file(dist / "entry_points.txt", "[workbench.backends]\ntoy = wb_toy_backend:BACKEND\n")
    monkeypatch.syspath_prepend(str(site))
    plugins.refresh()
    yield "toy"
    monkeypatch.undo()
    plugins.refresh()


def test_the_registry_lists_the_plugin_backend(toy_backend: str) -> None:
    from workbench.usecases.launch import backends, preflight

    choices = {b.name: b for b in backends()}
    assert {"local", "modal", "toy"} <= set(choices)
    assert choices["toy"].label == "toy (a test plugin)" and choices["toy"].takes == "run"
    assert preflight(None, "toy", env="adder", budget_usd=9).refusal == "toy refuses budgets over $5 (got $9)"


async def test_the_launch_dialog_offers_a_plugin_backend_and_obeys_its_preflight(
        toy_backend: str, make_app: Callable[..., WorkbenchApp]) -> None:
    app = _make(make_app, Recorder())
    async with app.run_test(size=SIZE) as pilot:
        dialog = await _open_dialog(pilot)
        assert isinstance(dialog, LaunchScreen)
        names = [b.name for b in dialog.query("#launch-backend RadioButton").results(RadioButton)]
        assert names[0] == "local" and {"modal", "toy"} <= set(names)
        toy = dialog.query_one("#backend-toy", RadioButton)
        assert not toy.value and "toy (a test plugin)" in str(toy.label)
        await pilot.click("#backend-toy")
        await wait_until(pilot, lambda: dialog.backend == "toy", what="the toy backend chosen")
        _fill(dialog, steps="3", budget="9")
        await wait_until(pilot, lambda: dialog.settled and dialog.forecast is not None
                         and dialog.forecast.backend == "toy" and dialog.forecast.inputs == (3, 9.0, None),
                         timeout=30, what="the toy backend's verdict")
        assert "toy refuses budgets over $5" in _plan_text(dialog)
        assert dialog.query_one("#launch-ok", Button).disabled
        _fill(dialog, steps="3", budget="2")
        await wait_until(pilot, lambda: dialog.settled and dialog.forecast is not None
                         and dialog.forecast.inputs == (3, 2.0, None), timeout=30, what="a budget it takes")
        assert "may launch" in _plan_text(dialog) and not dialog.query_one("#launch-ok", Button).disabled
