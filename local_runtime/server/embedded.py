"""The embedded model server, started on demand: ``workbench eval ENV`` with no ``--base-url``.

:func:`ensure_server` reuses a healthy server for the same model (its pid and port are kept in a
small state file under the XDG data dir) or starts ``python -m workbench_local.server`` in the
background on a free port, building the tiny model first if it is not cached.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench_local.models.loading import TINY_ALIASES

from workbench.errors import EndpointError

if TYPE_CHECKING:
    from workbench.runs.endpoint import ModelServer
from workbench.fsutil import atomic_write

START_TIMEOUT_S = 600.0  # a first run builds the tiny model (about a minute and a half on two cores) before serving
#: An on-demand server exits after this long without requests (``WORKBENCH_EMBEDDED_IDLE_S``; 0: never).
IDLE_EXIT_S = 1800.0


def state_dir() -> Path:
    from workbench.config.paths import data_dir

    return data_dir() / "embedded"


def _slug(spec: str) -> str:
    return "tiny" if spec in TINY_ALIASES else re.sub(r"[^A-Za-z0-9._-]+", "_", spec).strip("_")[:80] or "model"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours is not alive
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def health(base: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """The server's /health JSON, or None when it does not answer."""
    try:
        with urllib.request.urlopen(base.rstrip("/") + "/health", timeout=timeout) as r:
            data = json.loads(r.read())
            return data if isinstance(data, dict) else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _running(state: dict[str, Any] | None) -> tuple[str, str] | None:
    if not state or not isinstance(state.get("pid"), int) or not _alive(state["pid"]):
        return None
    root = f"http://{state.get('host', '127.0.0.1')}:{state.get('port')}"
    h = health(root)
    if not h or h.get("pid") != state["pid"] or h.get("model") != state.get("model"):
        return None  # a stale file, or the port now belongs to someone else
    return root + "/v1", str(h["model"])


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    keep = [ln for ln in text if ln.strip()][-lines:]
    return "\n".join(keep) or "(empty log)"


def _error_line(path: Path) -> str | None:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    found = [ln[len("error: "):].strip() for ln in lines if ln.startswith("error: ")]
    return found[-1] if found else None


def start_server(spec: str, *, extra_args: list[str] | None = None, timeout: float = START_TIMEOUT_S,
                 log: Any = None, name: str | None = None, logdir: Path | None = None,
                 progress: Callable[[str, int | None, int | None], None] | None = None) -> dict[str, Any]:
    """Start a server for ``spec`` in the background and wait until it is healthy; return its state.
    Its log and ready files are ``NAME.log`` / ``NAME.ready.json`` in ``logdir`` (default: the
    shared state dir, named after the model). ``progress(what, done, total)`` hears what the wait is for
    (building the tiny model on first use: its training steps)."""
    sdir = logdir or state_dir()
    sdir.mkdir(parents=True, exist_ok=True)
    slug = name or _slug(spec)
    logfile, ready = sdir / f"{slug}.log", sdir / f"{slug}.ready.json"
    ready.unlink(missing_ok=True)
    idle = os.environ.get("WORKBENCH_EMBEDDED_IDLE_S", str(IDLE_EXIT_S))
    cmd = [sys.executable, "-m", "workbench_local.server", "--model", spec, "--host", "127.0.0.1", "--port", "0",
           "--ready-file", str(ready), "--exit-when-idle", idle, *(extra_args or [])]
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    if log:
        from workbench_local.models.tiny_model import default_dir, is_current_build

        first = spec in TINY_ALIASES and not is_current_build(default_dir())
        log(f"starting the embedded model server for {spec}" + (
            " (first use: building the model, about a minute and a half)" if first else "") + f" (log: {logfile})")
    with open(logfile, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
    deadline = time.monotonic() + timeout
    building = spec in TINY_ALIASES
    while True:
        if progress is not None:
            _report_progress(progress, building)
        code = proc.poll()
        if code is not None:
            reason = _error_line(logfile)
            if reason:  # the server said what is wrong in one sentence: pass it on as is
                raise EndpointError(f"the embedded model server for {spec} could not start (exit code {code}): "
                                    f"{reason} (log: {logfile})")
            raise EndpointError(f"the embedded model server for {spec} exited with code {code} before serving; "
                                f"the end of its log ({logfile}):\n{_tail(logfile)}")
        info = _read_state(ready)
        if info and info.get("port"):
            root = f"http://127.0.0.1:{info['port']}"
            h = health(root)
            if h:
                state = {"pid": proc.pid, "host": "127.0.0.1", "port": info["port"], "model": h["model"],
                         "spec": spec, "log": str(logfile), "started_at": time.time()}
                return state
        if time.monotonic() > deadline:
            terminate(proc.pid)
            raise EndpointError(f"the embedded model server for {spec} did not become ready within {timeout:.0f}s; "
                                f"the end of its log ({logfile}):\n{_tail(logfile)}")
        time.sleep(0.2)


def _report_progress(progress: Callable[[str, int | None, int | None], None], building: bool) -> None:
    if building:
        from workbench_local.models.tiny_model import read_progress

        p = read_progress()
        if p is not None:
            what = "building the embedded model" if p.get("phase") == "training" else "checking the built model"
            progress(what, int(p.get("done", 0)), int(p.get("total", 0)) or None)
            return
    progress("starting the embedded model server", None, None)


def terminate(pid: int, grace: float = 5.0) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end and _alive(pid):
        time.sleep(0.05)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def ensure_server(model: str | None = None, *, timeout: float = START_TIMEOUT_S, log: Any = None,
                  progress: Callable[[str, int | None, int | None], None] | None = None) -> tuple[str, str]:
    """(base URL ending in /v1, model name) of a healthy embedded server for ``model`` (default: tiny);
    ``progress`` as for :func:`start_server`."""
    import fcntl

    spec = model or "tiny"
    sdir = state_dir()
    sdir.mkdir(parents=True, exist_ok=True)
    slug = _slug(spec)
    statefile = sdir / f"{slug}.json"
    if log is None:
        def log(msg: str) -> None:
            print(f"workbench: {msg}", file=sys.stderr, flush=True)
    with open(sdir / f"{slug}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two evals starting at once share one server
        found = _running(_read_state(statefile))
        if found:
            return found
        statefile.unlink(missing_ok=True)
        state = start_server(spec, timeout=timeout, log=log, progress=progress)
        atomic_write(statefile, json.dumps(state))
        return f"http://127.0.0.1:{state['port']}/v1", str(state["model"])


def stop_server(model: str | None = None) -> bool:
    """Stop the embedded server for ``model`` if this machine's state file names a live one."""
    statefile = state_dir() / f"{_slug(model or 'tiny')}.json"
    state = _read_state(statefile)
    statefile.unlink(missing_ok=True)
    if state and _running(state):
        terminate(int(state["pid"]))
        return True
    return False


class EmbeddedEndpoint:
    """The ``workbench.endpoints`` plugin ``embedded``: the model server used when no ``--base-url`` is given."""

    name = "embedded"

    def ensure(self, model: str | None = None, *, log: Any = None,
               progress: Callable[[str, int | None, int | None], None] | None = None) -> tuple[str, str]:
        """(base URL ending in /v1, model name) of a healthy server for ``model``, started if need be;
        ``progress(what, done, total)`` hears what the wait is for (a first build: its steps)."""
        return ensure_server(model, log=log, progress=progress)

    def start(self, spec: str, **kw: Any) -> dict[str, Any]:
        """A new server of its own for ``spec`` (see :func:`start_server`)."""
        return start_server(spec, **kw)

    def terminate(self, pid: int) -> None:
        terminate(pid)

    def check(self, model: str | None) -> None:
        """Refuse (``ModelLoadError``, one line) a model this server could not load here and now: not the
        embedded model, a model directory or a Hugging Face id in the local cache. Loads nothing."""
        from workbench_local.models.loading import TINY_ALIASES, resolve

        if model is None or model in TINY_ALIASES:
            return
        resolve(model, allow_download=False)


ENDPOINT: ModelServer = EmbeddedEndpoint()
