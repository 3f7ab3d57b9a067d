"""The Traces screen filters by where rollouts came from: model, imported (``workbench import``), human."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from textual.widgets import Input, Static
from workbench_app.main import WorkbenchApp
from workbench_app.screens.traces import TracesScreen
from workbench_app.widgets.virtual_table import VirtualTable

from tests.app.conftest import SIZE, wait_until
from workbench.runs.import_traces import import_file
from workbench.store import Store


def _rows(app: WorkbenchApp) -> list[str]:
    t = app.screen.query_one(VirtualTable)
    return [r.id for i in range(t.row_count) if (r := t.row(i)) is not None]


async def test_o_filters_by_source_model_imported_human(make_app: Callable[..., WorkbenchApp],
                                                                store_file: Path, tmp_path: Path) -> None:
    chats = tmp_path / "chats.jsonl"
    chats.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"hi {i}"},
                                                      {"role": "assistant", "content": f"hello {i}"}]}) + "\n"
                             for i in range(3)))
    with Store(store_file) as store:
        run = import_file(store, chats, "openai-jsonl").run_id
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, TracesScreen)
        table = screen.query_one(VirtualTable)
        status = screen.query_one("#traces-status", Static)
        await wait_until(pilot, lambda: table.total == 27, what="24 model rollouts and 3 imported ones")
        table.focus()
        # o steps through the sources: model, imported, human (none yet: nothing plays as a person), every one
        for total, where in ((24, "model"), (3, "imported"), (0, "human")):
            await pilot.press("o")
            assert screen.source == where
            await wait_until(pilot, lambda t=total: table.total == t and len(_rows(app)) == t,
                             what=f"{total} {where} rollouts")
            await wait_until(pilot, lambda w=where: f"source={w}" in str(status.render()), what="the filter shown")
            if where == "imported":
                assert sorted(_rows(app)) == [f"{run}.{i}.0" for i in range(3)]
            if where == "model":
                assert not any(r.startswith(run) for r in _rows(app))
        await pilot.press("o")
        assert screen.source is None
        await wait_until(pilot, lambda: table.total == 27, what="every source again")
        await pilot.press("o", "o")  # imported, with a text filter beside it
        await wait_until(pilot, lambda: table.total == 3, what="the imported rollouts")
        search = screen.query_one("#f-search", Input)
        search.focus()
        await pilot.press(*"hello", "enter")
        await wait_until(pilot, lambda: table.total == 3, what="imported rollouts that say hello")
        await pilot.press("escape", "c")  # clear: every source, every rollout again
        await wait_until(pilot, lambda: table.total == 27, what="every rollout again")
        assert screen.source is None
