"""The probe follows the reward: an edit that hot reloads re-runs the model-free probe policies in a
worker, and the Environments status line warns while the edited rubric pays a policy that should earn
nothing (the probe report's own verdict); an edit back clears it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from workbench_app.main import WorkbenchApp
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.widgets.footer import WorkbenchFooter

from tests.app.conftest import SIZE, screen_text, wait_until
from tests.helpers import ADDER_ENV, write_file

# The hole: any completion that holds the answer anywhere (every_answer lists them all) is "correct".
EXPLOITABLE = ADDER_ENV.replace("return float(bool(nums) and nums[-1] == answer)", "return float(answer in completion)")


def _screen(app: WorkbenchApp) -> EnvironmentsScreen:
    assert isinstance(app.screen, EnvironmentsScreen)
    return app.screen


def _status(app: WorkbenchApp) -> str:
    line = _screen(app).query_one("#env-status")
    return str(line.render()) if line.display else ""


async def test_an_edit_that_opens_a_hole_warns_and_an_edit_back_clears_it(
        make_app: Callable[..., WorkbenchApp], env_dir: Path) -> None:
    app = make_app(watch=True)
    async with app.run_test(size=SIZE) as pilot:
        screen = _screen(app)
        await wait_until(pilot, lambda: screen.envs.get("adder") and screen.envs["adder"].status == "ok",
                         what="adder to load")
        await wait_until(pilot, lambda: screen.hot_reload.started, what="the watcher to start")
        assert "exploitable" not in _status(app)  # loading is not an edit: no probe

        write_file(env_dir / "adder.py", EXPLOITABLE)
        edited = screen.envs["adder"].ref.version()
        await wait_until(pilot, lambda: screen.probe_follow.probed.get("adder") == edited, timeout=60,
                         what="the probe after the edit")
        await wait_until(pilot, lambda: "exploitable" in _status(app), what="the status line's warning")
        status = _status(app)
        assert "adder: the edit makes the rubric exploitable (every_answer earns 1.500" in status
        assert "P shows the probe" in status
        assert screen.query_one("#env-status").has_class("-warning")
        assert screen.query_one("#env-status").region.y < screen.query_one(WorkbenchFooter).region.y

        write_file(env_dir / "adder.py", ADDER_ENV)
        restored = screen.envs["adder"].ref.version()
        await wait_until(pilot, lambda: screen.probe_follow.probed.get("adder") == restored, timeout=60,
                         what="the probe after the edit back")
        assert "adder" not in screen.probe_follow.warnings
        await wait_until(pilot, lambda: "exploitable" not in _status(app), what="the warning to go")
        assert "exploitable" not in screen_text(app)
        # What the re-score found says the same as Traces: the fixture's run scored other files than these.
        await wait_until(pilot, lambda: "scored with an older rubric" in _status(app), timeout=30,
                         what="the stale scores line")
        assert _status(app).startswith("12 of 12 stored rollouts of adder were scored with an older rubric")
