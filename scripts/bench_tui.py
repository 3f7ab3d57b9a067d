"""Measure the Traces screen on a large store: first paint and scroll latency, headless.

    python scripts/bench_tui.py PATH [-n 1000000] [--pages 50] [--size 160x48]

Generates the store with ``scripts/gen_store.py PATH -n N`` when PATH does not exist. Then it opens
the app on Traces (``App.run_test``) and times:

- first paint: from the app starting to the first page of rows drawn (and the process's time since
  start, imports included), then the total count arriving;
- page down x N: each key press until every row on screen is loaded and drawn;
- End (jump to the oldest rollout) and Home;
- a filtered first paint for a few filters (env, reward range, rare-word full-text search).

Prints a table and, last, one JSON line with every number (seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

T_PROCESS = time.perf_counter()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from textual.geometry import Region  # noqa: E402
from workbench_app.config import TuiConfig  # noqa: E402
from workbench_app.main import WorkbenchApp  # noqa: E402
from workbench_app.screens.traces import TracesScreen  # noqa: E402
from workbench_app.widgets.virtual_table import VirtualTable  # noqa: E402

FILTERS = [("env", {"env": "wordle"}), ("reward 0.2..0.4", {"min_reward": "0.2", "max_reward": "0.4"}),
           ("text 'quokka'", {"text": "quokka"}), ("error any", {"error_kind": "any"})]


def visible_loaded(table: VirtualTable) -> bool:
    top = int(table.scroll_offset.y)
    height = max(1, table.scrollable_content_region.height - 1)
    end = min(table.row_count, top + height)
    return all(table.row(i) is not None for i in range(top, end))


async def wait(pilot: Any, cond: Any, timeout: float = 60.0) -> None:
    deadline = time.perf_counter() + timeout
    while not cond():
        if time.perf_counter() > deadline:
            raise TimeoutError("the table did not load in time")
        await asyncio.sleep(0.001)
    await pilot.pause()  # one more turn of the loop: the refresh is drawn


def stats(lat: list[float]) -> dict[str, Any]:
    return {"n": len(lat), "median_s": statistics.median(lat), "p95_s": pct(lat, 0.95), "max_s": max(lat)}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


async def bench(path: Path, pages: int, size: tuple[int, int]) -> dict[str, Any]:
    out: dict[str, Any] = {"store": str(path)}
    t0 = time.perf_counter()
    app = WorkbenchApp(path, config=TuiConfig(), discover_fn=list, watch=False, mode="traces")
    async with app.run_test(size=size) as pilot:
        screen = app.screen
        assert isinstance(screen, TracesScreen)
        table = screen.query_one(VirtualTable)
        await wait(pilot, lambda: table.row(0) is not None and visible_loaded(table))
        out["first_paint_s"] = time.perf_counter() - t0
        out["first_paint_since_process_start_s"] = time.perf_counter() - T_PROCESS
        await wait(pilot, lambda: table.total is not None)
        out["count_s"] = time.perf_counter() - t0
        out["rollouts"] = table.total

        base = []
        for _ in range(10):  # a key bound to nothing: what Pilot itself costs per press
            t = time.perf_counter()
            await pilot.press("z")
            await wait(pilot, lambda: True)
            base.append(time.perf_counter() - t)
        out["pilot_noop_key_s"] = statistics.median(base)
        lat = []
        for _ in range(pages):
            t = time.perf_counter()
            await pilot.press("pagedown")
            await wait(pilot, lambda: visible_loaded(table))
            lat.append(time.perf_counter() - t)
        out["page_down"] = stats(lat)
        direct = []
        for _ in range(pages):  # the same without Pilot: action, rows loaded, visible lines rendered
            t = time.perf_counter()
            table.action_page(1)
            while not visible_loaded(table):
                await asyncio.sleep(0.0005)
            table.render_lines(Region(0, 0, table.size.width, table.size.height))
            direct.append(time.perf_counter() - t)
        out["page_down_direct"] = stats(direct)
        t = time.perf_counter()  # a scrollbar drag to the middle: no cached neighbour, offset paging
        table.scroll_to(y=(table.row_count or 0) // 2, animate=False, immediate=True)
        await wait(pilot, lambda: visible_loaded(table))
        out["jump_middle_s"] = time.perf_counter() - t
        for key in ("end", "home"):
            t = time.perf_counter()
            await pilot.press(key)
            await wait(pilot, lambda: visible_loaded(table))
            out[f"{key}_s"] = time.perf_counter() - t
        out["cursor_row_after_end"] = table.row_count - 1

        out["filtered"] = {}
        for label, values in FILTERS:
            t = time.perf_counter()
            screen.set_filters(**values)
            await wait(pilot, lambda: table.source is not None and (table.total == 0 or table.row(0) is not None))
            first = time.perf_counter() - t
            await wait(pilot, lambda: table.total is not None)
            out["filtered"][label] = {"first_paint_s": first, "count_s": time.perf_counter() - t,
                                      "rows": table.total}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", type=Path)
    ap.add_argument("-n", type=int, default=1_000_000, help="rollouts to generate when PATH does not exist")
    ap.add_argument("--pages", type=int, default=50, help="page-down presses to time")
    ap.add_argument("--size", default="160x48", help="terminal size WxH")
    a = ap.parse_args(argv)
    if not a.path.exists():
        gen = Path(__file__).with_name("gen_store.py")
        print(f"generating {a.n:,} rollouts into {a.path} …", file=sys.stderr)
        subprocess.run([sys.executable, str(gen), str(a.path), "-n", str(a.n)], check=True)
    w, h = (int(x) for x in a.size.lower().split("x"))
    res = asyncio.run(bench(a.path, a.pages, (w, h)))
    ms = lambda s: f"{s * 1000:8.1f} ms"  # noqa: E731
    print(f"store            {res['store']} ({res['rollouts']:,} rollouts)")
    print(f"first paint      {ms(res['first_paint_s'])}  (since process start {ms(res['first_paint_since_process_start_s'])})")
    print(f"count            {ms(res['count_s'])}")
    print(f"pilot no-op key  {ms(res['pilot_noop_key_s'])}  (Pilot's own cost per key press, in the numbers below)")
    for key, label in (("page_down", "page down (Pilot)"), ("page_down_direct", "page down (direct)")):
        pd = res[key]
        print(f"{label:<19} x{pd['n']}  median {ms(pd['median_s'])}  p95 {ms(pd['p95_s'])}  max {ms(pd['max_s'])}")
    print(f"jump to middle   {ms(res['jump_middle_s'])}  (scrollbar drag: offset paging)")
    print(f"end / home       {ms(res['end_s'])} / {ms(res['home_s'])}")
    for label, f in res["filtered"].items():
        print(f"filter {label:<16} first paint {ms(f['first_paint_s'])}  count {ms(f['count_s'])}  "
              f"({f['rows']:,} rows)")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
