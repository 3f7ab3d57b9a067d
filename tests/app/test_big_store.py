"""Traces on a generated store: lazy pages, End/Home, keyset paging backwards, filters.

By default the store has 20,000 rollouts (a few seconds to generate). For the 1,000,000-rollout
store of the issue, point WORKBENCH_TUI_BIG_STORE at one made by ``scripts/gen_store.py`` (or set
WORKBENCH_TUI_BIG_N=1000000); ``scripts/bench_tui.py`` measures first paint and scroll latency.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from workbench_app.config import TuiConfig
from workbench_app.main import WorkbenchApp
from workbench_app.screens.traces import TracesScreen
from workbench_app.widgets.virtual_table import VirtualTable

from tests.app.conftest import wait_until
from tests.helpers import REPO

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    given = os.environ.get("WORKBENCH_TUI_BIG_STORE")
    if given:
        yield Path(given)
        return
    script = REPO / "scripts" / "gen_store.py"
    if not script.is_file():
        pytest.skip("scripts/gen_store.py is missing")
    path = tmp_path_factory.mktemp("big") / "big.db"
    n = os.environ.get("WORKBENCH_TUI_BIG_N", "20000")
    subprocess.run([sys.executable, str(script), str(path), "-n", n, "--workers", "0"], check=True,
                   capture_output=True, timeout=1800)
    yield path


def _rows(path: Path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM rollout").fetchone()[0])
    finally:
        conn.close()


async def test_traces_on_a_big_store(big_store: Path) -> None:
    total = _rows(big_store)
    t0 = time.perf_counter()
    app = WorkbenchApp(big_store, config=TuiConfig(), discover_fn=list, watch=False, mode="traces")
    async with app.run_test(size=(140, 40)) as pilot:
        assert isinstance(app.screen, TracesScreen)
        table = app.screen.query_one(VirtualTable)
        await wait_until(pilot, lambda: table.row(0) is not None, what="the first page")
        first_paint = time.perf_counter() - t0
        assert first_paint < 10, first_paint  # generous for a loaded CI box; bench_tui.py measures it
        await wait_until(pilot, lambda: table.total == total, what="the count")
        assert len(table._pages) <= 2  # only what was needed was read

        await pilot.press("end")
        last = await wait_until(pilot, lambda: table.row(total - 1), what="the last row")
        assert table.cursor == total - 1
        first_pk = table.row(0).pk if table.row(0) else None
        assert last.pk != first_pk

        for _ in range(8):  # backwards from the end: keyset pages read in reverse order
            await pilot.press("pageup")
        index = table.cursor
        row = await wait_until(pilot, lambda: table.row(index), what="rows above the end")
        newer = await wait_until(pilot, lambda: table.row(index - 1), what="the row above")
        assert newer.pk > row.pk  # newest first

        await pilot.press("home")
        await wait_until(pilot, lambda: table.row(0) is not None, what="the first row again")
        assert table.cursor == 0

        app.screen.set_filters(env="wordle", min_reward="0.5")
        await wait_until(pilot, lambda: table.total is not None and table.row(0) is not None, what="filtered rows")
        assert 0 < table.total < total
        assert all(table.row(i).env_name == "wordle" and table.row(i).reward >= 0.5
                   for i in range(min(20, table.total)))
