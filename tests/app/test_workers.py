"""The app runs work off the UI thread one way (``workbench_app.workers``): no other module starts a thread
or makes an event loop, and no module hops to the UI thread by ``call_from_thread`` (results are messages)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"
MECHANISM = APP / "workers.py"

#: name -> why it belongs in workers.py only
BANNED = {
    "Thread": "a thread of its own (threading.Thread): use a Textual thread worker",
    "call_from_thread": "a hop to the UI thread: post a message (workers.post_ui)",
    "new_event_loop": "an event loop of its own: workers.CancellableRun or workers.SessionLoop",
    "run": "asyncio.run, an event loop of its own: workers.CancellableRun",
}


def violations(source: str) -> list[str]:
    """``line: what`` for each thread started, event loop made or ``call_from_thread`` in ``source``."""
    tree = ast.parse(source)
    found = []
    asyncio_names = {"asyncio"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("threading", "asyncio"):
            for alias in node.names:
                if alias.name in ("Thread", "new_event_loop", "run"):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            asyncio_names |= {a.asname or a.name for a in node.names if a.name == "asyncio"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Thread":
            found.append(f"{node.lineno}: Thread — {BANNED['Thread']}")  # started; a type annotation is not
        if not isinstance(node, ast.Attribute) or node.attr not in ("call_from_thread", "new_event_loop", "run"):
            continue
        if node.attr == "run" and not (isinstance(node.value, ast.Name) and node.value.id in asyncio_names):
            continue  # a worker's or a session's own run
        found.append(f"{node.lineno}: {node.attr} — {BANNED[node.attr]}")
    return found


def test_only_the_workers_module_makes_threads_loops_or_ui_hops() -> None:
    files = sorted(p for p in APP.rglob("*.py") if p != MECHANISM)
    assert len(files) > 20
    found = {str(p.relative_to(APP)): v for p in files if (v := violations(p.read_text()))}
    assert found == {}


def test_the_workers_module_is_where_they_are_and_nothing_hops_by_call() -> None:
    found = violations(MECHANISM.read_text())
    assert {v.split()[1] for v in found} == {"Thread", "new_event_loop", "run"}  # and no call_from_thread


@pytest.mark.parametrize("source", [
    "import threading\nthreading.Thread(target=print).start()\n",
    "from threading import Thread\n",
    "def f(self):\n    self.app.call_from_thread(print, 1)\n",
    "import asyncio\nloop = asyncio.new_event_loop()\n",
    "import asyncio as aio\naio.run(main())\n",
    "from asyncio import run\n",
])
def test_a_planted_thread_loop_or_hop_is_found(source: str) -> None:
    assert violations(source)


def test_a_workers_own_run_is_not_flagged() -> None:
    assert violations("async def f(loop, coro):\n    await loop.run(coro)\n    self.runner.run(make)\n") == []
