"""Fixtures for the TUI tests: a small deterministic store, env files, an app factory.

The store is written through the real ``Store``/``BatchWriter`` with fixed timestamps, so the
screens (and their SVG snapshots) show the same thing on every run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("textual")

from workbench_app.config import TuiConfig  # noqa: E402
from workbench_app.main import WorkbenchApp  # noqa: E402

from tests.helpers import ADDER_ENV, write_file  # noqa: E402
from workbench.authoring.discovery import EnvRef  # noqa: E402
from workbench.authoring.rubric import Scores  # noqa: E402
from workbench.records.rollout import ModelCall, RolloutError, Usage  # noqa: E402
from workbench.records.task import Task  # noqa: E402
from workbench.store import RolloutRecord, Store  # noqa: E402

#: How much longer than asked a wait may take before it fails: the states come, only slower, on a loaded machine.
LOAD_STRETCH = 4.0
T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
SIZE = (120, 36)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Private XDG dirs, no endpoint variables, UTC clock (snapshots print times)."""
    for var in [k for k in os.environ if k.startswith(("WORKBENCH_", "OPENAI_"))]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring")
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def steady_cursors(app: WorkbenchApp) -> None:
    """Every text field's cursor drawn, not blinking: the picture does not depend on when it is taken."""
    for screen in app.screen_stack:
        for field in screen.query("Input, TextArea"):
            field.cursor_blink = False  # type: ignore[attr-defined]


@pytest.fixture
def snap_compare(snap_compare: Any) -> Callable[..., bool]:
    """pytest-textual-snapshot's ``snap_compare``, with every cursor steady when the picture is taken."""

    def compare(app: Any, *args: Any, run_before: Callable[[Any], Awaitable[None] | None] | None = None,
                **kwargs: Any) -> bool:
        async def settled(pilot: Any) -> None:
            if run_before is not None:
                result = run_before(pilot)
                if result is not None:
                    await result
            steady_cursors(pilot.app)
            await pilot.pause()

        return bool(snap_compare(app, *args, run_before=settled, **kwargs))

    return compare


def _record(run: str, env: str, model: str, i: int, *, reward: float | None, error: str | None = None,
            tool: bool = False) -> RolloutRecord:
    a, b = i, i + 1
    task = Task(prompt=f"What is {a} + {b}?", answer=str(a + b), info={"i": i})
    answer = str(a + b) if (reward or 0) >= 1 else str(a + b + 1)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Answer with a number."},
        {"role": "user", "content": f"What is {a} + {b}?"},
    ]
    calls = [ModelCall(0, 2, None, "stop", 12, 3, 0.05)]
    if tool:
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": f'{{"a": {a}, "b": {b}}}'}}]})
        messages.append({"role": "tool", "tool_call_id": "call_1", "name": "add", "content": str(a + b)})
        calls.append(ModelCall(1, 4, None, "stop", 20, 4, 0.07))
    if error is None:
        messages.append({"role": "assistant", "content": f"The answer is {answer}"})
    scores = Scores(rewards={} if reward is None else {"correct": reward},
                    metrics={} if reward is None else {"words": 4.0}, total=reward or 0.0)
    errors = [] if error is None else [RolloutError(error, "model" if error != "tool" else "add", f"{error} happened")]
    return RolloutRecord(
        id=f"{run}.{i}.0", run_id=run, env_name=env, model=model, task=task, task_index=i, sample_index=0,
        status="ok" if error is None else "error", error_kind=error, reward=reward,
        usage=Usage(12 + 8 * tool, 3 + tool, 0.0001 * (i + 1)), duration_s=0.25 + i / 100, turns=1 + tool,
        completion="" if error else f"The answer is {answer}", messages=messages, state={}, scores=scores,
        calls=calls, errors=errors, created_at=T0 + 60 * i + (0 if run.endswith("a") else 3600))


def populate(path: Path) -> Path:
    """Two runs of 12 rollouts: adder on mock-model and wordplay on other-model; errors and tool calls."""
    store = Store(path)
    try:
        for run, env, model, offset in (("1114-aaaaaa", "adder", "mock-model", 0),
                                        ("1114-bbbbbb", "wordplay", "other-model", 3600)):
            store.create_run(run, kind="eval", env_name=env, env_version="0123456789ab", env_source="test",
                             model=model, n_tasks=12, rollouts_per_task=1, status="completed",
                             created_at=T0 + offset, finished_at=T0 + offset + 30)
            recs = []
            for i in range(12):
                err = "timeout" if i == 5 else "tool" if i == 9 and env == "wordplay" else None
                reward = None if err else float(i % 3 != 0)
                recs.append(_record(run, env, model, i, reward=reward, error=err, tool=(i == 2)))
            w = store.writer()
            w.submit(recs)
            w.close()
    finally:
        store.close()
    return path


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    return populate(tmp_path / "store" / "workbench.db")


@pytest.fixture
def env_dir(tmp_path: Path) -> Path:
    d = tmp_path / "envs"
    write_file(d / "adder.py", ADDER_ENV)
    return d


@pytest.fixture
def make_app(store_file: Path, env_dir: Path, tmp_path: Path) -> Callable[..., WorkbenchApp]:
    """``make_app(mode="traces", watch=False, cls=WorkbenchApp, **config)``: an app (of ``cls``, a
    WorkbenchApp subclass if given) on the fixture store and env folder."""

    def make(mode: str = "environments", watch: bool = False, cls: type[WorkbenchApp] = WorkbenchApp,
             **cfg: Any) -> WorkbenchApp:
        config = TuiConfig(export_dir=tmp_path / "exports", **cfg)

        def discover() -> list[EnvRef]:
            return [EnvRef(p.stem, "path", p) for p in sorted(env_dir.glob("*.py"))]

        return cls(store_file, config=config, discover_fn=discover, watch=watch, mode=mode)

    return make


async def wait_until(pilot: Any, predicate: Callable[[], Any], timeout: float = 15.0,
                     what: str = "condition") -> Any:
    """Let the app run until ``predicate()`` is truthy (workers are threads; keep pumping the loop).

    ``timeout`` only bounds a wait for a state that never comes; it is stretched by ``LOAD_STRETCH`` so that a
    machine loaded several times over its cores (other test processes, CI neighbours) is not a failure."""
    deadline = time.monotonic() + timeout * LOAD_STRETCH
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await pilot.pause(0.05)


Waiter = Callable[[Any, Callable[[], Any]], Awaitable[Any]]


def envs_ready(app: WorkbenchApp) -> bool:
    """The Environments screen is up with every environment loaded (none still "loading")."""
    from workbench_app.screens.environments import EnvironmentsScreen

    s = app.screen
    return isinstance(s, EnvironmentsScreen) and bool(s.envs) and all(e.status != "loading" for e in s.envs.values())


def screen_text(app: Any) -> str:
    """What the terminal shows now, as plain text."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(seg.text for seg in strip).rstrip() for strip in strips)
