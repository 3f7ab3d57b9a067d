"""``ensure_server``: the embedded server started on demand, reused while healthy, restarted when its
state file is stale, and a clear error with the log's tail when it cannot start."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from workbench_local.server.embedded import terminate

from workbench.errors import EndpointError

from .helpers import ROOT, get_json


@pytest.fixture()
def xdg(tmp_path: Path, tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Private XDG dirs with the (fast) tiny model already in the cache, so nothing is rebuilt."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    shutil.copytree(tiny_dir, tmp_path / "cache" / "workbench" / "models" / "workbench-tiny-v1")
    yield tmp_path
    from workbench_local.server.embedded import stop_server

    stop_server(None)


def test_starts_then_reuses(xdg: Path) -> None:
    from workbench_local.server.embedded import ensure_server, state_dir

    url, model = ensure_server(None)
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    assert model == "workbench-tiny"
    assert [m["id"] for m in get_json(url + "/models")["data"]] == ["workbench-tiny"]
    state = json.loads((state_dir() / "tiny.json").read_text())
    assert state_dir().is_relative_to(xdg / "data")
    url2, _ = ensure_server("tiny")
    assert url2 == url
    assert json.loads((state_dir() / "tiny.json").read_text())["pid"] == state["pid"]


def test_stale_state_file_is_ignored(xdg: Path) -> None:
    from workbench_local.server.embedded import ensure_server, state_dir

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    state_dir().mkdir(parents=True, exist_ok=True)
    (state_dir() / "tiny.json").write_text(json.dumps({"pid": dead.pid, "host": "127.0.0.1", "port": 9,
                                                      "model": "workbench-tiny"}))
    url, model = ensure_server(None)
    state = json.loads((state_dir() / "tiny.json").read_text())
    assert state["pid"] != dead.pid and f":{state['port']}/" in url and model == "workbench-tiny"
    (state_dir() / "tiny.json").write_text("not json")  # a corrupt file is stale too
    try:
        url2, _ = ensure_server(None)
        assert url2 != url and get_json(url2 + "/models")["data"]
    finally:
        terminate(state["pid"])  # the first server is no longer in the state file: stop it here


def test_on_demand_server_exits_when_idle(xdg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench_local.server.embedded import _alive, ensure_server, state_dir

    monkeypatch.setenv("WORKBENCH_EMBEDDED_IDLE_S", "1.5")
    url, _ = ensure_server(None)
    pid = json.loads((state_dir() / "tiny.json").read_text())["pid"]
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(pid)
    url2, _ = ensure_server(None)  # and the next call starts a fresh one
    assert get_json(url2 + "/models")["data"]


def test_failure_to_start_is_a_clear_error(xdg: Path) -> None:
    from workbench_local.server.embedded import ensure_server

    with pytest.raises(EndpointError) as e:
        ensure_server(str(xdg / "no-such-model"))
    msg = str(e.value)
    assert "could not start (exit code 2)" in msg and "no model directory at" in msg and "\n" not in msg


def test_eval_without_base_url_uses_embedded_server(xdg: Path) -> None:
    """``workbench eval arithmetic`` with no --base-url starts the embedded server and runs against it."""
    env = {**os.environ, "WORKBENCH_DB": str(xdg / "wb.db"), "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "workbench.cli", "eval", "arithmetic", "-n", "12", "-r", "2", "--json"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["model"] == "workbench-tiny" and out["rollouts"] == 24 and out["errors"] == 0


def test_resolve_model_path_never_builds(xdg: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench_local.models.loading import ModelLoadError
    from workbench_local.models.resolve import resolve_model_path

    assert resolve_model_path("workbench-tiny") == xdg / "cache" / "workbench" / "models" / "workbench-tiny-v1"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    with pytest.raises(ModelLoadError, match="not built yet"):
        resolve_model_path("tiny")
    assert not (tmp_path / "empty-cache").exists()
    from workbench_local.models.tiny_model import BUILD_FILE, default_dir

    stale = default_dir()
    stale.mkdir(parents=True)
    (stale / BUILD_FILE).write_text('{"recipe": 1}')  # a cached build the server would rebuild at first use
    with pytest.raises(ModelLoadError, match="older recipe"):
        resolve_model_path("workbench-tiny")


@pytest.mark.slow  # builds the tiny model
def test_a_first_build_reports_its_progress_to_whoever_waits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first eval on a fresh machine waits for the tiny model's build: the builder says how far it is
    (a progress file beside the model) and the waiting side turns that into (what, done, total)."""
    from workbench_local.models import tiny_model
    from workbench_local.server.embedded import _report_progress

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    target = tiny_model.default_dir()
    target.parent.mkdir(parents=True)
    seen: list[tuple[str, int, int]] = []
    write = tiny_model._progress_writer(target)

    def both(phase: str, done: int, total: int) -> None:
        write(phase, done, total)
        heard: list[tuple[str, int | None, int | None]] = []
        _report_progress(lambda *a: heard.append(a), building=True)
        assert heard and heard[-1][1:] == (done, total)
        seen.append((heard[-1][0], done, total))

    tiny_model.build_tiny_model(tmp_path / "built", fast=True, steps=30, progress=both)
    assert [d for _, d, _ in seen] == [0, 10, 20, 30] and {t for _, _, t in seen} == {30}
    assert seen[0][0] == "building the embedded model" and seen[-1][0] == "checking the built model"
    tiny_model.progress_file(target).unlink()
    heard: list[tuple[str, int | None, int | None]] = []
    _report_progress(lambda *a: heard.append(a), building=True)
    assert heard == [("starting the embedded model server", None, None)]
