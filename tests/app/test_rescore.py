"""Live re-scoring on the Environments screen: edit a reward on disk, the watcher reloads the env,
its stored rollouts are re-scored in a worker, and the before/after panel shows the right numbers.

The fixture store holds run 1114-aaaaaa of ``adder``: 12 rollouts, one failed (a timeout), the 11
others scored ``correct`` = 1 for i % 3 != 0 (7 of 11) with completions that agree, and no group
bonus stored.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from workbench_app.main import WorkbenchApp
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.widgets.reward_compare import RewardCompare

from tests.app.conftest import SIZE, screen_text, wait_until
from tests.helpers import ADDER_ENV, query, write_file

STORED = [float(i % 3 != 0) for i in range(12) if i != 5]  # the scored rollouts' rewards
CORRECT = "        return float(bool(nums) and nums[-1] == answer)\n"
# The edit: a wrong answer now earns 0.25, and the group bonus is off by default.
EDITED = ADDER_ENV.replace(CORRECT, "        return 1.0 if bool(nums) and nums[-1] == answer else 0.25\n") \
    .replace("group_bonus: bool = True", "group_bonus: bool = False")
AFTER = [1.0 if r else 0.25 for r in STORED]


def _screen(app: WorkbenchApp) -> EnvironmentsScreen:
    assert isinstance(app.screen, EnvironmentsScreen)
    return app.screen


def _panel(app: WorkbenchApp) -> RewardCompare:
    return _screen(app).query_one(RewardCompare)


def _stats(xs: list[float]) -> tuple[float, float]:
    m = math.fsum(xs) / len(xs)
    return m, math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))


async def _loaded(pilot: Any, app: WorkbenchApp, name: str = "adder") -> None:
    await wait_until(pilot, lambda: name in _screen(app).envs and _screen(app).envs[name].status == "ok",
                     what=f"{name} to load")


async def test_live_rescoring_after_a_reward_edit(make_app: Callable[..., WorkbenchApp], env_dir: Path,
                                                  store_file: Path) -> None:
    stored = query(store_file, "SELECT pk, reward FROM rollout ORDER BY pk")
    app = make_app(watch=True)
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        await wait_until(pilot, lambda: _screen(app).hot_reload.started, what="the watcher to start")
        await pilot.pause(0.3)
        assert not _panel(app).display  # loading is not an edit: nothing re-scored yet

        write_file(env_dir / "adder.py", EDITED)
        st = await wait_until(pilot, lambda: _screen(app).envs["adder"].rescore, timeout=30,
                              what="the re-score after the edit")
        assert _screen(app).envs["adder"].rescoring is None
        before, after = _stats(STORED), _stats(AFTER)
        assert st.before.mean == pytest.approx(before[0], abs=1e-12)  # 7/11
        assert st.after.mean == pytest.approx(after[0], abs=1e-12)  # 8/11
        assert st.before.stderr == pytest.approx(before[1], abs=1e-12)
        assert st.after.stderr == pytest.approx(after[1], abs=1e-12)
        assert (st.considered, st.rescored, st.changed, st.failed) == (12, 11, 4, 0)
        assert st.skipped == {"failed before scoring (no reward to re-compute)": 1}
        assert st.env_version == _screen(app).envs["adder"].version

        panel = _panel(app)
        await wait_until(pilot, lambda: panel.display and panel.result is st, what="the comparison panel")
        lines = [f"before {before[0]:.3f} (se {before[1]:.3f}) · n 11", f"after {after[0]:.3f} (se {after[1]:.3f}) · n 11",
                 "adder re-scored: 4 of 11 changed · 0 with errors", "skipped 1: failed before scoring"]
        # the whole panel, once painted and no longer under the re-score's notification
        await wait_until(pilot, lambda: all(line in screen_text(app) for line in lines), what="the panel painted")
        rows = {f.name: f for f in st.functions}
        assert rows["correct"].changed == 4 and rows["words"].changed == 0
        note = await wait_until(pilot, lambda: next((n for n in app._notifications if n.title == "re-scored"), None),
                                what="the re-score's notification")
        assert f"{before[0]:.3f} → {after[0]:.3f}, 4 of 11 rollouts changed" in note.message
        assert app.is_running
    # The TUI only shows: the stored rewards are the originals.
    assert query(store_file, "SELECT pk, reward FROM rollout ORDER BY pk") == stored
    assert query(store_file, "SELECT COUNT(*) FROM rescore") == [(0,)]


async def test_rescore_on_demand_and_errors_as_notifications(make_app: Callable[..., WorkbenchApp],
                                                             env_dir: Path) -> None:
    write_file(env_dir / "fresh.py", ADDER_ENV.replace('name="adder"', 'name="fresh"'))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        await pilot.press("R")  # unedited: the group bonus the fixture never stored adds 0.5 to each
        st = await wait_until(pilot, lambda: _screen(app).envs["adder"].rescore, timeout=30, what="the re-score")
        assert st.after.mean == pytest.approx(_stats(STORED)[0] + 0.5, abs=1e-12) and st.changed == 11
        assert _panel(app).display

        # A reward that raises is counted against it and shown, not a crash.
        write_file(env_dir / "adder.py", ADDER_ENV.replace(CORRECT, "        raise RuntimeError('judge down')\n"))
        await pilot.press("r")
        await wait_until(pilot, lambda: (s := _screen(app).envs["adder"].rescore) is not None and s is not st,
                         timeout=30, what="the re-score after the reload")
        res = _screen(app).envs["adder"].rescore
        assert res.errors == {"correct": 11} and res.failed == 11
        assert "RuntimeError: judge down" in res.error_examples["correct"]
        await wait_until(pilot, lambda: "correct: RuntimeError: judge down" in screen_text(app), what="the error shown")
        note = next(n for n in app._notifications if n.title == "re-scored" and "with errors" in n.message)
        assert note.severity == "warning"

        # An env with nothing stored: a warning, and no panel for it.
        await _loaded(pilot, app, "fresh")
        await pilot.press("down")
        assert _screen(app)._selected().name == "fresh"
        assert not _panel(app).display
        await pilot.pause()
        assert _screen(app).query_one("#env-detail-box").region.height == 12  # back to its own height
        await pilot.press("R")
        await wait_until(pilot, lambda: any("no stored rollouts" in n.message for n in app._notifications),
                         what="the nothing-stored warning")
        assert not _panel(app).display

        # An env that no longer loads is refused before any work.
        write_file(env_dir / "fresh.py", "def load_environment(:\n")
        await pilot.press("r")
        await wait_until(pilot, lambda: _screen(app).envs["fresh"].status == "error", what="fresh to break")
        await pilot.press("R")
        await wait_until(pilot, lambda: any("does not load" in n.message for n in app._notifications),
                         what="the refusal")
        assert app.is_running


async def test_the_rescore_panel_goes_when_the_env_breaks(make_app: Callable[..., WorkbenchApp],
                                                          env_dir: Path) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        await pilot.press("R")
        await wait_until(pilot, lambda: _screen(app).envs["adder"].rescore, timeout=30, what="the re-score")
        await wait_until(pilot, lambda: _panel(app).display, what="the panel")

        write_file(env_dir / "adder.py", "def load_environment(:\n")
        await pilot.press("r")
        await wait_until(pilot, lambda: _screen(app).envs["adder"].status == "error", what="adder to break")
        await pilot.pause(0.1)
        assert not _panel(app).display and _screen(app).envs["adder"].rescore is None
        assert "re-scored" not in screen_text(app)

        write_file(env_dir / "adder.py", EDITED)  # fixed, and edited: its new re-score shows
        await pilot.press("r")
        await wait_until(pilot, lambda: _screen(app).envs["adder"].rescore, timeout=30, what="the new re-score")
        await wait_until(pilot, lambda: _panel(app).display, what="the panel again")
