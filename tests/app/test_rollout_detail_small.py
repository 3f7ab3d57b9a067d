"""The rollout detail at 80×24: the overview, the scores and the messages, nothing cut."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workbench_app.main import WorkbenchApp
from workbench_app.screens.rollout_detail import RolloutDetailScreen

from tests.app.conftest import screen_text, wait_until
from workbench.store.queries import get_rollout


async def _open(pilot: Any, rollout_id: str) -> RolloutDetailScreen:
    app = pilot.app
    screen = RolloutDetailScreen(get_rollout(app.store.get().conn, rollout_id))
    await app.push_screen(screen)
    await wait_until(pilot, lambda: app.screen is screen and rollout_id in screen_text(app), what="the detail")
    return screen


async def test_the_overview_is_whole_at_80x24(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(mode="traces")
    async with app.run_test(size=(80, 24)) as pilot:
        await _open(pilot, "1114-aaaaaa.2.0")
        text = screen_text(app)
        for line in ("rollout      1114-aaaaaa.2.0   run 1114-aaaaaa", "timing       0.27 s, 2 turns, at 2023-11-14 22:15",
                     "tokens       20 prompt / 4 completion"):
            assert line in text


def test_rollout_detail_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    async def run_before(pilot: Any) -> None:
        await _open(pilot, "1114-aaaaaa.2.0")
        await wait_until(pilot, lambda: pilot.app.screen.score_age_read, what="the score's age")
        pilot.app.clear_notifications()
        await pilot.pause()

    assert snap_compare(make_app(mode="traces"), terminal_size=(80, 24), run_before=run_before)


def test_one_turn_is_said_in_the_singular(make_app: Callable[..., WorkbenchApp]) -> None:
    from rich.console import Console
    from workbench_app.screens.rollout_detail import overview

    console = Console(width=80, record=True)
    for turns, said in ((1, "1 turn, at"), (2, "2 turns, at"), (0, "0 turns, at")):
        console.print(overview({"id": "r", "turns": turns, "duration_s": 0.5, "created_at": 0.0}))
        assert said in console.export_text()


async def test_a_reward_scored_with_older_files_says_so(make_app: Callable[..., WorkbenchApp]) -> None:
    """adder's run scored with version 0123456789ab; its files hash to another version now: the detail says
    so, in the words Environments uses. wordplay has no files here: nothing to compare, nothing said."""
    app = make_app(mode="traces")
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await _open(pilot, "1114-aaaaaa.2.0")
        await wait_until(pilot, lambda: "an older rubric's score" in screen_text(app), what="the score's age")
        assert "scored with adder 0123456789ab; its files are now" in screen_text(app)
        await pilot.press("escape")
        other = await _open(pilot, "1114-bbbbbb.2.0")
        await wait_until(pilot, lambda: other.score_age_read, what="the age read")
        assert screen is not other and "older rubric" not in screen_text(app)
