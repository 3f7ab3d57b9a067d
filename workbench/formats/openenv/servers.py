"""Where an OpenEnv environment's sessions are opened: a running server, or servers Workbench starts.

Every rollout has a session of its own (a websocket: its own environment instance on the server). A server
allows as many sessions at once as its ``max_concurrent_envs``; it answers one more with ``CAPACITY_REACHED``.
On a running server (a URL) the rollout then waits for a free session. A server Workbench starts (an
environment's folder or package in the OpenEnv framework environment, or a Docker image) is one of a set:
when every server of the set is full, another one starts. Started servers are stopped when Workbench exits
(a local server also ends by itself when its standard input, held by Workbench, closes).
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import itertools
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import EnvLoadError
from workbench.formats.openenv.protocol import CAPACITY_REACHED, OpenEnvError, Session, StepResult, healthy

#: How long a started server may take to answer (importing its app, a container's start).
START_TIMEOUT_S = 180.0
#: The longest pause between tries of a running server that others keep full.
_MAX_WAIT_S = 2.0
#: The pause of a rollout waiting for a session of this process's to end.
_LOCAL_WAIT_S = 0.02
#: How long a running server's learned session limit is trusted before it is tried again.
_CAPACITY_HINT_S = 30.0
#: How long a server Workbench started may go without a session before it is stopped (the next starts another).
IDLE_STOP_S = 120.0
SERVE_SCRIPT = Path(__file__).with_name("serve.py")


class Started:
    """A server Workbench started: its URL and how to stop it."""

    def __init__(self, url: str, stop: Callable[[], None]) -> None:
        self.url, self._stop, self.stopped = url, stop, False

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self._stop()


def _tail(path: Path, n: int = 3) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[-600:]


@dataclass(frozen=True, slots=True)
class LocalLauncher:
    """An environment served by ``serve.py`` with the OpenEnv framework environment's interpreter:
    ``args`` are serve.py's (``--app-dir DIR`` or ``--dist NAME``); ``label`` names it in errors."""

    python: Path
    args: tuple[str, ...]
    label: str

    def start(self) -> Started:
        log = Path(tempfile.mkstemp(prefix="workbench-openenv-", suffix=".log")[1])
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
        env.update(ENABLE_WEB_INTERFACE="false", PYTHONUNBUFFERED="1", NO_COLOR="1")
        with open(log, "wb") as err:
            proc = subprocess.Popen([str(self.python), "-I", str(SERVE_SCRIPT), *self.args], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=err, env=env, start_new_session=True)
        line = _read_line(proc, START_TIMEOUT_S)

        def stop() -> None:
            if proc.stdin:
                proc.stdin.close()
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
            if proc.stdout:
                proc.stdout.close()
            log.unlink(missing_ok=True)

        if not line.startswith("READY "):
            why = _tail(log) or (f"it exited with {proc.poll()}" if proc.poll() is not None else
                                 f"it printed no port in {START_TIMEOUT_S:g} s")
            stop()
            raise EnvLoadError(f"the OpenEnv server of {self.label} did not start: {why}")
        return Started(f"http://127.0.0.1:{int(line.split()[1])}", stop)


def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    box: list[bytes] = []
    t = threading.Thread(target=lambda: box.append(proc.stdout.readline() if proc.stdout else b""), daemon=True)
    t.start()
    t.join(timeout)
    return box[0].decode(errors="replace").strip() if box else ""


_names = itertools.count()


@dataclass(frozen=True, slots=True)
class DockerLauncher:
    """An environment's image run as a container whose port (``port``, 8000 for openenv-core's images) is
    published on 127.0.0.1 only."""

    image: str
    port: int = 8000

    def start(self) -> Started:
        name = f"workbench-openenv-{os.getpid()}-{next(_names)}"
        run = _docker("run", "--detach", "--name", name, "--label", "workbench.openenv=1",
                      "--env", "ENABLE_WEB_INTERFACE=false", "--publish", f"127.0.0.1::{self.port}", self.image)
        if run.returncode != 0:
            raise EnvLoadError(f"cannot start the Docker image {self.image}: {_docker_error(run.stderr)}")

        def stop() -> None:
            _docker("rm", "--force", name)

        try:
            url = self._url(name)
        except BaseException:
            stop()
            raise
        return Started(url, stop)

    def _url(self, name: str) -> str:
        port = _docker("port", name, f"{self.port}/tcp")
        hostport = next((ln.strip() for ln in port.stdout.splitlines() if ln.strip().startswith("127.0.0.1:")), "")
        if port.returncode != 0 or not hostport:
            self._check_running(name)
            raise EnvLoadError(f"the container of {self.image} publishes no port {self.port}: "
                               f"{_docker_error(port.stderr)}")
        url = f"http://{hostport}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not healthy(url):
            self._check_running(name)
            if time.monotonic() > deadline:
                raise EnvLoadError(f"the container of {self.image} did not answer /health in {START_TIMEOUT_S:g} s")
            time.sleep(0.3)
        return url


    def _check_running(self, name: str) -> None:
        state = _docker("inspect", "--format", "{{.State.Running}} {{.State.ExitCode}}", name)
        running, _, code = state.stdout.strip().partition(" ")
        if running != "true":
            logs = _docker("logs", "--tail", "3", name)
            said = " | ".join(ln.strip() for ln in (logs.stdout + logs.stderr).splitlines() if ln.strip())[-600:]
            raise EnvLoadError(f"the container of {self.image} exited (code {code or '?'}) before serving"
                               f"{': ' + said if said else ''}; an OpenEnv image serves on port {self.port}")


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=START_TIMEOUT_S)
    except FileNotFoundError:
        raise EnvLoadError("openenv+docker: needs the docker command, which is not installed here") from None
    except subprocess.TimeoutExpired:
        raise EnvLoadError(f"docker {args[0]} did not finish in {START_TIMEOUT_S:g} s") from None


def _docker_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not ln.startswith("Run 'docker")]
    errors = [ln for ln in lines if "error" in ln.lower()] or lines
    return (errors[-1] if errors else "").removeprefix("docker: ")[:400]


@dataclass(slots=True)
class _Slot:
    url: str
    started: Started | None = None
    active: int = 0
    capacity: int | None = None  # learned when the server answers CAPACITY_REACHED
    #: until when a running server's learned capacity holds (others may have held the sessions it counted)
    capacity_until: float = float("inf")
    idle_since: float = field(default_factory=time.monotonic)  # when its last session ended

    def free(self) -> bool:
        if self.capacity is not None and time.monotonic() > self.capacity_until:
            self.capacity = None
        return self.capacity is None or self.active < self.capacity


class Servers:
    """The servers one environment's sessions open on: a fixed URL, or servers a launcher starts."""

    def __init__(self, url: str | None = None, launcher: LocalLauncher | DockerLauncher | None = None) -> None:
        self.launcher = launcher
        self.slots: list[_Slot] = [] if url is None else [_Slot(url)]
        self._lock = threading.Lock()  # the slots' counts: held briefly, also on the event loop
        self._starting = threading.Lock()  # one server starts at a time, off the event loop
        if launcher is not None:
            atexit.register(self.stop)

    def first_url(self) -> str:
        """The URL of a server (started here when there is none yet)."""
        with self._starting:
            with self._lock:
                if self.slots:
                    return self.slots[0].url
            slot = self._start()
            with self._lock:
                self.slots.append(slot)
            self._reap_later()
            return slot.url

    def _start(self) -> _Slot:
        """A new server (the caller holds ``_starting``, never ``_lock``: sessions go on while it starts)."""
        assert self.launcher is not None
        started = self.launcher.start()
        return _Slot(started.url, started)

    def _pick(self) -> _Slot | None:
        with self._lock:
            slot = next((s for s in self.slots if s.free()), None)
            if slot is not None:
                slot.active += 1
            return slot

    def _grow(self) -> _Slot:
        """A session's place on a new server, or on one that came free while it waited to start one."""
        with self._starting:
            slot = self._pick()
            if slot is not None:
                return slot
            slot = self._start()
            with self._lock:
                slot.active += 1
                self.slots.append(slot)
            return slot

    async def open(self, reset_args: dict[str, Any]) -> tuple[Session, StepResult, Callable[[], None]]:
        """A new session, reset with ``reset_args``: the session, the first observation and how to release it."""
        delay = 0.05
        while True:
            slot = self._pick()
            if slot is None and self.launcher is None:  # a running server, full of ours: one ends soon
                await asyncio.sleep(_LOCAL_WAIT_S)
                continue
            if slot is None:
                slot = await asyncio.to_thread(self._grow)
            session = Session(slot.url)
            try:
                await session.open()
                first = await session.reset(**reset_args)
            except BaseException as e:
                await session.close()
                full = isinstance(e, OpenEnvError) and e.code == CAPACITY_REACHED
                with self._lock:
                    slot.active -= 1
                    if full:  # a server of ours: the next one takes the session; a running one: wait
                        slot.capacity = max(1, slot.active)
                        if self.launcher is None:
                            slot.capacity_until = time.monotonic() + _CAPACITY_HINT_S
                if not full:
                    raise
                if self.launcher is None and slot.active == 0:  # others hold its sessions: wait for them
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, _MAX_WAIT_S)
                continue
            return session, first, functools.partial(self._release, slot)

    def _release(self, slot: _Slot) -> None:
        with self._lock:
            slot.active -= 1
            if slot.active == 0 and slot.started is not None:
                slot.idle_since = time.monotonic()
                self._reap_later()

    def _reap_later(self) -> None:
        timer = threading.Timer(IDLE_STOP_S + 0.1, self._reap)
        timer.daemon = True
        timer.start()

    def _reap(self) -> None:
        """Stop the started servers that have had no session for :data:`IDLE_STOP_S`."""
        now = time.monotonic()
        with self._lock:
            idle = [s for s in self.slots if s.started is not None and s.active == 0
                    and now - s.idle_since >= IDLE_STOP_S]
            self.slots = [s for s in self.slots if s not in idle]
        for s in idle:
            assert s.started is not None
            s.started.stop()

    def stop(self) -> None:
        with self._lock:
            slots, self.slots = self.slots, [s for s in self.slots if s.started is None]
        for s in slots:
            if s.started is not None:
                s.started.stop()


def framework_python(requirements: tuple[str, ...]) -> Path:
    """The OpenEnv framework environment's interpreter (built once per requirement list)."""
    from workbench.frameworks.venvs import FrameworkEnv

    return FrameworkEnv("openenv", requirements, base_python=sys.executable).ensure()
