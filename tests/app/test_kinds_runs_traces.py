"""Runs, Traces and the Environments screen show the user's own kinds of run first: a store holding two
evaluations, a validate pipeline (one run per probe policy) and a Play session; K shows the other kinds,
a pipeline's entry opens on its runs; m marks a run in its row; a search's hits are highlighted in the
transcript; registered model names; an empty store says what to do first."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from textual.widgets import DataTable, Input, Static
from workbench_app.config import TuiConfig
from workbench_app.main import WorkbenchApp
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.screens.rollout_detail import RolloutDetailScreen
from workbench_app.screens.runs import RunsScreen
from workbench_app.screens.traces import FIRST_STEP, TracesScreen
from workbench_app.widgets.virtual_table import VirtualTable

from tests.app.conftest import SIZE, T0, _record, screen_text, wait_until
from workbench.store import Store

# slow: a Pilot run per screen
pytestmark = pytest.mark.slow

SMALL = (80, 24)
PIPELINE = "1114-pipe01"
VALIDATE_RUNS = {"1114-vvvvv1": "probe:echo_prompt", "1114-vvvvv2": "probe:empty"}
PLAY_RUN = "1114-play01"
EVALS = ["1114-bbbbbb", "1114-aaaaaa"]  # the fixture store's two evaluations, newest first


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the store's path is shown relative to it


@pytest.fixture
def kinds_store(store_file: Path) -> Path:
    """The fixture store (two evaluations) plus, newer than both, a validate pipeline of two policies on
    adder (3 rollouts each) and a Play session on adder (2 rollouts, both rewarded 1.0)."""
    store = Store(store_file)
    try:
        for n, (run, model) in enumerate(VALIDATE_RUNS.items()):
            store.create_run(run, kind="validate", env_name="adder", env_version="0123456789ab", env_source="test",
                             model=model, n_tasks=3, rollouts_per_task=1, status="completed",
                             created_at=T0 + 9000 + n, finished_at=T0 + 9010,
                             config={"pipeline": {"id": PIPELINE, "kind": "validate", "stage": model[6:]}})
            w = store.writer()
            w.submit([_record(run, "adder", model, i, reward=0.0) for i in range(3)])
            w.close()
        store.create_run(PLAY_RUN, kind="play", env_name="adder", env_version="0123456789ab", env_source="test",
                         model="human", n_tasks=2, rollouts_per_task=1, status="completed",
                         created_at=T0 + 9500, finished_at=T0 + 9600)
        w = store.writer()
        w.submit([_record(PLAY_RUN, "adder", "human", i, reward=1.0) for i in range(2)])
        w.close()
    finally:
        store.close()
    return store_file


@pytest.fixture
def kinds_app(kinds_store: Path, make_app: Callable[..., WorkbenchApp]) -> Callable[..., WorkbenchApp]:
    return make_app


def _text_of(renderable: Any) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def _runs(app: WorkbenchApp) -> RunsScreen:
    assert isinstance(app.screen, RunsScreen), app.screen
    return app.screen


def _listed(app: WorkbenchApp) -> list[str]:
    table = _runs(app).query_one(DataTable)
    return [str(k.value) for k in table.rows]


async def _runs_listed(pilot: Any, app: WorkbenchApp, ids: list[str]) -> None:
    await wait_until(pilot, lambda: _listed(app) == ids, what=f"the runs {ids} (have {_listed(app)})")


async def test_runs_list_the_users_kinds_and_k_steps_through_the_others(
        kinds_app: Callable[..., WorkbenchApp]) -> None:
    app = kinds_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        await _runs_listed(pilot, app, EVALS)
        screen = _runs(app)
        assert screen.sub_title.endswith("· kind: mine")
        assert str(screen.query_one(DataTable).get_cell(EVALS[0], "kind")) == "eval"

        await pilot.press("K")  # every kind: the pipeline is one entry, not one per policy
        await _runs_listed(pilot, app, [PLAY_RUN, PIPELINE, *EVALS])
        assert str(screen.query_one(DataTable).get_cell(PIPELINE, "kind")) == "validate"

        for kind, ids in (("probe", []), ("validate", [PIPELINE]), ("debug", []), ("play", [PLAY_RUN])):
            await pilot.press("K")
            await _runs_listed(pilot, app, ids)
            assert screen.sub_title.endswith(f"· kind: {kind}")


async def test_a_pipeline_entry_opens_on_its_runs_and_escape_goes_back(
        kinds_app: Callable[..., WorkbenchApp]) -> None:
    app = kinds_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        await _runs_listed(pilot, app, EVALS)
        await pilot.press("K", "K", "K")  # all, probe, validate
        await _runs_listed(pilot, app, [PIPELINE])
        summary = _runs(app).query_one("#run-summary", Static)
        await wait_until(pilot, lambda: "echo_prompt" in screen_text(app) and "empty" in screen_text(app),
                         what="the pipeline's policies in the summary")
        assert summary.display
        await pilot.press("enter")
        await _runs_listed(pilot, app, list(VALIDATE_RUNS))  # its runs, oldest first
        assert _runs(app).sub_title.endswith("· pipeline 1114-pipe01 (escape: back)")
        await wait_until(pilot, lambda: "probe:echo_prompt" in screen_text(app) and "3 over 3 tasks" in screen_text(app),
                         what="the first policy run's summary")
        await pilot.press("escape")
        await _runs_listed(pilot, app, [PIPELINE])


async def test_t_on_a_policy_run_shows_its_rollouts_whatever_its_kind(kinds_app: Callable[..., WorkbenchApp]) -> None:
    app = kinds_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        await _runs_listed(pilot, app, EVALS)
        await pilot.press("K", "K", "K")  # validate
        await _runs_listed(pilot, app, [PIPELINE])
        await pilot.press("enter")
        await _runs_listed(pilot, app, list(VALIDATE_RUNS))
        await pilot.press("t")
        await wait_until(pilot, lambda: isinstance(app.screen, TracesScreen) and app.screen.query(VirtualTable),
                         what="Traces")
        ids = await _rows(pilot, app, 3)
        assert {i.split(".")[0] for i in ids} == {"1114-vvvvv1"}
        assert _traces(app).filters.kinds is None


async def test_m_marks_a_run_in_its_row(kinds_app: Callable[..., WorkbenchApp]) -> None:
    app = kinds_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        await _runs_listed(pilot, app, EVALS)
        table = _runs(app).query_one(DataTable)
        await pilot.press("m")
        assert _runs(app).marked == [EVALS[0]]
        assert str(table.get_cell(EVALS[0], "mark")) == "●" and str(table.get_cell(EVALS[1], "mark")) == ""
        await wait_until(pilot, lambda: re.search(r"●\s+1114-bbbbbb", screen_text(app)), what="the marker in the row")
        await pilot.press("m")  # again: unmarked
        assert _runs(app).marked == [] and str(table.get_cell(EVALS[0], "mark")) == ""


def _traces(app: WorkbenchApp) -> TracesScreen:
    assert isinstance(app.screen, TracesScreen), app.screen
    return app.screen


async def _rows(pilot: Any, app: WorkbenchApp, total: int) -> list[str]:
    table = _traces(app).query_one(VirtualTable)

    def loaded() -> tuple[list[str]] | None:
        rows = [table.row(i) for i in range(table.row_count)]
        ids = [r.id for r in rows if r is not None]
        return (ids,) if table.total == total and len(ids) == total else None

    (ids,) = await wait_until(pilot, loaded, what=f"{total} rows (have {table.total})")
    return ids


async def test_traces_show_the_users_rollouts_and_k_the_others(kinds_app: Callable[..., WorkbenchApp]) -> None:
    app = kinds_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        ids = await _rows(pilot, app, 24)
        assert {i.split(".")[0] for i in ids} == set(EVALS)
        for kind, total in (("all", 24 + 6 + 2), ("probe", 0), ("validate", 6), ("debug", 0), ("play", 2)):
            await pilot.press("K")
            ids = await _rows(pilot, app, total)
            assert _traces(app).filters.describe() == f"kind={kind}"
            assert f"kind: {kind}" in str(_traces(app).query_one("#traces-status", Static).render())
        assert {i.split(".")[0] for i in ids} == {PLAY_RUN}
        await pilot.press("c")  # clear filters: the user's own kinds again
        await _rows(pilot, app, 24)


async def test_the_model_filter_filters_by_what_was_typed(kinds_app: Callable[..., WorkbenchApp]) -> None:
    """``probe`` typed in the model filter is not completed to probe:echo_prompt behind the user's back."""
    app = kinds_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _rows(pilot, app, 24)
        await pilot.press("K")  # every kind
        await _rows(pilot, app, 32)
        model = _traces(app).query_one("#f-model", Input)
        await wait_until(pilot, lambda: model.suggester is not None, what="the known values")
        model.focus()
        await pilot.press(*"probe", "enter")
        await _rows(pilot, app, 0)
        assert model.value == "probe" and _traces(app).filters.model == "probe"
        await pilot.press("right", "enter")  # → takes the suggestion shown
        await _rows(pilot, app, 3)
        assert model.value == "probe:echo_prompt"


async def test_filter_fields_are_readable_at_80x24(kinds_app: Callable[..., WorkbenchApp]) -> None:
    app = kinds_app(mode="traces")
    async with app.run_test(size=SMALL) as pilot:
        await _rows(pilot, app, 24)
        await pilot.pause()
        widths = {i.id: i.content_size.width for i in _traces(app).query(Input)}
        assert all(w > 8 for w in widths.values()), widths
        assert max(len(line) for line in screen_text(app).splitlines()) <= 80


async def test_the_latest_reward_is_of_the_users_runs(kinds_app: Callable[..., WorkbenchApp]) -> None:
    """The validate and Play runs on adder are newer, but adder's latest reward is its evaluation's."""
    app = kinds_app()
    async with app.run_test(size=SIZE) as pilot:
        def adder() -> Any:
            s = app.screen
            return isinstance(s, EnvironmentsScreen) and s.envs.get("adder") and s.envs["adder"].latest

        latest = await wait_until(pilot, adder, what="adder's latest run")
        assert latest["id"] == "1114-aaaaaa" and latest["kind"] == "eval"
        assert str(app.screen.query_one(DataTable).get_cell("adder", "run")) == "1114-aaaaaa"


def _spans(content: Any) -> list[str]:
    """The highlighted stretches of what a Static shows (the message bodies have no other style)."""
    return [content.plain[s.start:s.end] for s in content.spans]


async def test_a_search_is_highlighted_in_the_transcript_and_n_goes_from_hit_to_hit(
        kinds_app: Callable[..., WorkbenchApp]) -> None:
    app = kinds_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _rows(pilot, app, 24)
        search = _traces(app).query_one("#f-search", Input)
        search.focus()
        await pilot.press(*"answer", "enter")
        await _rows(pilot, app, 21)  # the three failed rollouts have no answer
        await pilot.press("escape", "enter")
        detail = await wait_until(pilot, lambda: isinstance(app.screen, RolloutDetailScreen) and app.screen,
                                  what="the rollout")
        assert detail.hits == [0, 2]  # the system prompt ("Answer with...") and the answer
        assert _spans(detail.query_one("#message-0", Static).render()) == ["Answer"]
        assert _spans(detail.query_one("#message-2", Static).render()) == ["answer"]
        assert _spans(detail.query_one("#message-1", Static).render()) == []
        await pilot.press("n")  # the first hit
        assert detail.hit == 0 and "hit 1/2" in detail.sub_title
        await pilot.press("n")
        assert detail.hit == 1 and "hit 2/2" in detail.sub_title
        await pilot.press("n")  # round the end
        assert detail.hit == 0
        await pilot.press("N")  # back round the start
        assert detail.hit == 1


async def test_registered_names_tell_two_runs_of_one_model_id_apart(store_file: Path, env_dir: Path,
                                                                    make_app: Callable[..., WorkbenchApp]) -> None:
    store = Store(store_file)
    try:
        for n, name in enumerate(("fast", "careful")):
            run = f"1114-reg00{n}"
            store.create_run(run, kind="eval", env_name="adder", env_version="0123456789ab", env_source="test",
                             model="shared-id", n_tasks=1, rollouts_per_task=1, status="completed",
                             created_at=T0 + 9000 + n, finished_at=T0 + 9010, config={"model_name": name})
            w = store.writer()
            w.submit([_record(run, "adder", "shared-id", 0, reward=1.0)])
            w.close()
    finally:
        store.close()
    app = make_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        await _runs_listed(pilot, app, ["1114-reg001", "1114-reg000", *EVALS])
        table = _runs(app).query_one(DataTable)
        assert [str(table.get_cell(r, "model")) for r in ("1114-reg001", "1114-reg000")] == ["careful", "fast"]
        summary = _runs(app).query_one("#run-summary", Static)
        await wait_until(pilot, lambda: "shared-id (registered as careful)" in _text_of(summary.content),
                         what="the summary's model")
        app.switch_mode("traces")
        await wait_until(pilot, lambda: isinstance(app.screen, TracesScreen) and app.screen.query(VirtualTable),
                         what="Traces")
        await _rows(pilot, app, 26)
        text = await wait_until(pilot, lambda: "careful" in screen_text(app) and screen_text(app), what="the names")
        assert "fast" in text and "shared-id" not in text


async def test_an_empty_store_says_what_to_do_first(tmp_path: Path) -> None:
    app = WorkbenchApp(tmp_path / "empty" / "workbench.db", config=TuiConfig(export_dir=tmp_path / "exports"),
                       discover_fn=lambda: [], watch=False, mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        status = _traces(app).query_one("#traces-status", Static)
        await wait_until(pilot, lambda: str(status.render()) == FIRST_STEP, what="the first step")


def _settled_on(ready: Callable[[WorkbenchApp], Any]) -> Callable[[Any], Any]:
    async def run_before(pilot: Any) -> None:
        await wait_until(pilot, lambda: ready(pilot.app), what="the screen's data")
        await pilot.pause(0.2)
        pilot.app.clear_notifications()
        await pilot.pause()

    return run_before


def test_runs_of_every_kind_80x24_snapshot(snap_compare: Any, kinds_app: Callable[..., WorkbenchApp]) -> None:
    """Runs at 80x24 with K pressed once (every kind): the kind column, the pipeline's one entry."""
    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await _runs_listed(pilot, app, EVALS)
        await pilot.press("K", "m")
        await _runs_listed(pilot, app, [PLAY_RUN, PIPELINE, *EVALS])
        await wait_until(pilot, lambda: "human" in screen_text(app) and "mean reward" in screen_text(app),
                         what="the play run's summary")
        await pilot.pause(0.2)
        app.clear_notifications()
        await pilot.pause()

    assert snap_compare(kinds_app(mode="runs"), terminal_size=SMALL, run_before=run_before)


def test_traces_of_the_users_kinds_80x24_snapshot(snap_compare: Any, kinds_app: Callable[..., WorkbenchApp]) -> None:
    """Traces at 80x24: the filters on two rows, the user's own rollouts, the kind in the status line."""
    def ready(app: WorkbenchApp) -> bool:
        s = app.screen
        if not isinstance(s, TracesScreen):
            return False
        t = s.query_one(VirtualTable)
        return t.total == 24 and t.row(23) is not None

    assert snap_compare(kinds_app(mode="traces"), terminal_size=SMALL, run_before=_settled_on(ready))
