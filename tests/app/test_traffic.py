"""The Traffic screen: the gateway's recorded exchanges, newest first and read again while shown; the routes it
published; an exchange's answer and feedback; a filter; ``t`` makes the app's traffic an environment. The
store is written by the gateway's own recorder (real Store, BatchWriter, SQLite); Pilot drives the app, at
80x24 too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Input
from workbench_app.config import load_config
from workbench_app.main import WorkbenchApp
from workbench_app.screens.traffic import TrafficScreen

from tests.app.conftest import SIZE, screen_text, wait_until
from workbench.gateway.live_routes import publish
from workbench.gateway.recorder import TrafficRecorder
from workbench.gateway.routes import Arm, Route
from workbench.records.model_reply import ChatResponse
from workbench.records.rollout import Rollout
from workbench.records.task import Task
from workbench.store import Store
from workbench.store.traffic import add_feedback


def _exchange(rec: TrafficRecorder, app: str, arm: str, question: str, answer: str, rid: str,
              session: str | None = None) -> None:
    rollout = Rollout(id=rid, task=Task(prompt="", id=rid), sample_index=0, client=None,  # type: ignore[arg-type]
                      base_url="", model=arm, params={})
    messages = [{"role": "user", "content": question}]
    rollout.record_call(messages, ChatResponse({"role": "assistant", "content": answer}, "stop", 5, 3), 0.01)
    rec.record(app=app, route="support", spec="support=good:0.5,cand:0.5", arm=arm, api="chat",
               session=rec.session_of(session, messages), messages=messages, rollout=rollout, response_id=rid)


@pytest.fixture
def traffic_store(tmp_path: Path) -> Path:
    path = tmp_path / "traffic" / "workbench.db"
    path.parent.mkdir(parents=True)
    store = Store(path)
    rec = TrafficRecorder(store)
    _exchange(rec, "shop", "good", "where is my order 1042?", "It ships tomorrow.", "gwr-1", "s1")
    _exchange(rec, "shop", "cand", "refund my order please", "Refund issued.", "gwr-2", "s2")
    _exchange(rec, "helpdesk", "good", "reset my password", "Use the link we sent.", "gwr-3", "s3")
    rec.close()
    add_feedback(store.conn, app="shop", response_id="gwr-1", score=1.0, label="thumbs_up")
    store.close()
    publish({"support": Route("support", (Arm("good", 0.5), Arm("cand", 0.5)), "shadowy")})
    return path


def _app(db: Path) -> WorkbenchApp:
    return WorkbenchApp(db, config=load_config(), discover_fn=list, watch=False, mode="traffic")


def _answers(table: DataTable[Any]) -> list[str]:
    return [str(table.get_row_at(i)[5]) for i in range(table.row_count)]


@pytest.mark.parametrize("size", [SIZE, (80, 24)], ids=["wide", "80x24"])
async def test_the_screen_tails_the_traffic_with_routes_answers_and_feedback(traffic_store: Path,
                                                                              size: tuple[int, int]) -> None:
    app = _app(traffic_store)
    async with app.run_test(size=size) as pilot:
        screen = app.screen
        assert isinstance(screen, TrafficScreen)
        table = screen.query_one("#traffic-table", DataTable)
        await wait_until(pilot, lambda: table.row_count == 3, what="three exchanges")
        assert _answers(table) == ["Use the link we sent.", "Refund issued.", "It ships tomorrow."]  # newest first
        text = await wait_until(pilot, lambda: "support" in screen_text(app) and screen_text(app), what="routes")
        assert "good 50%" in text and "shadow shadowy" in text
        table.move_cursor(row=2)
        await wait_until(pilot, lambda: "feedback on this answer: 1 thumbs_up" in screen.detail,
                         what="the exchange's feedback")
        assert "where is my order 1042?" in screen.detail and "It ships tomorrow." in screen.detail
        # a new exchange shows up while the screen is shown (it reads the store again)
        with Store(traffic_store) as store:
            rec = TrafficRecorder(store)
            _exchange(rec, "shop", "good", "is it raining?", "No.", "gwr-4", "s4")
            rec.close()
        await wait_until(pilot, lambda: table.row_count == 4, timeout=20, what="the new exchange")


async def test_filter_and_t_make_the_apps_traffic_an_environment(traffic_store: Path, tmp_path: Path) -> None:
    from workbench.authoring.templates import default_dir

    app = _app(traffic_store)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        table = screen.query_one("#traffic-table", DataTable)
        await wait_until(pilot, lambda: table.row_count == 3, what="three exchanges")
        await pilot.press("slash")
        field = screen.query_one("#traffic-filter", Input)
        field.value = "refund"
        await pilot.press("enter")
        await wait_until(pilot, lambda: table.row_count == 1, what="the filtered exchange")
        assert _answers(table) == ["Refund issued."]
        await pilot.press("t")
        made = await wait_until(pilot, lambda: [p for p in default_dir().glob("traffic_shop_*")
                                                if (p / "tasks.jsonl").is_file()], what="the new environment")
        tasks = (made[0] / "tasks.jsonl").read_text().splitlines()
        assert len(tasks) == 2  # the app's two exchanges, not the helpdesk's
        await pilot.press("question_mark")
        actions = {desc for _, desc, _ in app.screen._rows}
        assert {"Filter", "Tasks from this app", "Refresh"} <= actions
