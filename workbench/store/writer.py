"""Rollouts are committed in groups by a writer process, so SQLite work never holds the eval's GIL.

``BatchWriter.submit`` turns a group into one JSON document (plus its packed token traces) and pipes
what gathered over a few milliseconds to the writer process (``serve``) in one write, from the
submitting thread itself; the writer process turns the documents into rows, commits what arrives
within ``linger_s`` in one transaction and acknowledges each commit. Every committed batch is a
complete SQLite transaction in WAL mode, so the file is never corrupted. When the eval process dies,
the writer process exits at once, abandoning what it has not committed, just as a writer thread
would have died with it: a killed eval loses at most the batch in flight (about ``linger_s`` of
rollouts).
"""

from __future__ import annotations

import math
import os
import pickle
import queue
import select
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from workbench.errors import StoreError
from workbench.store.db import connect
from workbench.store.rows import (  # noqa: F401 - the SQL is re-exported for scripts/gen_store.py
    _CALL_SQL,
    _COST_SQL,
    _ERROR_SQL,
    _FTS_SQL,
    _OPTS,
    _ROLLOUT_SQL,
    _SCORE_SQL,
    _write,
    dumps,
)

if TYPE_CHECKING:
    import asyncio

    from workbench.authoring.rubric import Scores
    from workbench.records.rollout import ModelCall, RolloutError, Usage
    from workbench.records.task import Task
    from workbench.records.trace import Trace

@dataclass(slots=True)
class RolloutRecord:
    """Everything the store keeps about one finished rollout."""

    id: str
    run_id: str
    env_name: str
    model: str
    task: Task
    task_index: int
    sample_index: int
    status: str
    error_kind: str | None
    reward: float | None
    usage: Usage
    duration_s: float
    turns: int
    completion: str
    messages: list[dict[str, Any]]
    state: dict[str, Any]
    scores: Scores
    calls: list[ModelCall]
    errors: list[RolloutError]
    created_at: float = field(default_factory=time.time)
    provider: str = ""
    trace: Trace | None = None
    source: str = "model"  # who acted: model | human (imported runs are written by workbench/store/imports.py)


# What the eval process pipes to the writer process: a group (``_group_rows``),
# or one of these markers.
_FLUSH = "flush"  # commit now, then acknowledge
_CLOSE = "close"  # commit, acknowledge, exit
#: How long submitted groups gather (under an event loop) before they go down the pipe in one write.
_SEND_EVERY_S = 0.005
# The writer process's program: argv is this package's root, then serve's arguments. The packages
# ``workbench`` and ``workbench.store`` are put in place without running their ``__init__`` (the
# public API, the store's query layer): the writer process needs this module and a few it imports,
# and starts in a third of the time.
_CHILD = (
    "import sys, types\n"
    "for name in ('workbench', 'workbench.store'):\n"
    "    pkg = types.ModuleType(name); pkg.__path__ = [sys.argv[1] + '/' + name.replace('.', '/')]\n"
    "    sys.modules[name] = pkg\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from workbench.store.writer import serve\n"
    "serve(*sys.argv[2:])\n"
)


def _clean_state(state: dict[str, Any]) -> dict[str, Any]:
    if not state:
        return state
    return {k: v for k, v in state.items() if not k.startswith("_") and k != "task"}


def _jsonable(obj: Any) -> Any:
    """``obj`` with what orjson refuses even with a ``default`` (integers beyond 64 bits) made text."""
    if isinstance(obj, int) and not isinstance(obj, bool) and not -(2**63) <= obj < 2**64:
        return str(obj)
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    return obj


def _group_payload(records: list[RolloutRecord]) -> bytes:
    """A group as one JSON document (one orjson call in the eval process: the writer process turns it
    into rows, so the per-field JSON encoding and the search text cost the rollouts' thread nothing),
    pickled with the packed token traces, which are binary."""
    tasks: dict[str, tuple[Any, Any, Any]] = {}
    rollouts = []
    traces: list[Any] | None = None
    for i, r in enumerate(records):
        t, u, sc = r.task, r.usage, r.scores
        if t.id not in tasks:
            tasks[t.id] = (t.prompt, t.answer, t.info)
        errors = [(e.kind, e.source, e.message) for e in r.errors]
        if sc.errors:
            errors += [("reward", name, msg) for name, msg in sc.errors]
        reward = r.reward
        if reward is not None and not math.isfinite(reward):  # JSON has no inf: said here, stored as none
            errors.append(("reward", "total", f"the total reward {reward} is not a finite number; not stored"))
            reward = None
        rollouts.append((
            r.id, r.run_id, r.env_name, r.model, t.id, r.task_index, r.sample_index, r.status, r.error_kind,
            reward, u.prompt_tokens, u.completion_tokens, u.cost_usd, r.duration_s, r.turns, r.created_at,
            r.completion, r.messages, _clean_state(r.state), sc.rewards, sc.metrics,
            [(c.index, c.n_messages, c.finish_reason, c.prompt_tokens, c.completion_tokens, c.latency_s * 1000.0,
              c.extra or None) for c in r.calls],
            errors, r.provider, r.source))
        if r.trace is not None and r.trace.has_tokens:
            nodes, ids, lps, mask = r.trace.pack()
            traces = traces or [None] * len(records)
            traces[i] = (nodes, ids, lps, mask, len(mask), len(r.trace.mismatches))
    doc = (tasks, rollouts)
    try:
        data = orjson.dumps(doc, option=_OPTS, default=repr)
    except orjson.JSONEncodeError:
        data = orjson.dumps(_jsonable(doc), option=_OPTS, default=repr)
    return pickle.dumps((len(records), data, traces), pickle.HIGHEST_PROTOCOL)


class BatchWriter:
    """Commits submitted groups of rollouts from a writer process (see the module docstring).

    ``error`` holds the first failure (a failed commit, or the writer process gone); ``submit``,
    ``flush`` and ``close`` raise it.
    """

    def __init__(self, path: Path | str, *, max_batch: int = 2048, linger_s: float = 0.05,
                 on_commit: Any = None) -> None:
        self.path = Path(path)
        self.on_commit = on_commit
        self.committed = 0
        self.batches = 0
        self.error: BaseException | None = None
        self._acked = threading.Condition()
        self._flushes_sent = self._flushes_done = 0
        self._gone = False
        root = Path(__file__).resolve().parents[2]
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - read when the writer process fails
        # Its own session: a Ctrl-C at the terminal interrupts the eval, which then closes the writer cleanly.
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(root), str(self.path.resolve()), str(max_batch), repr(linger_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, start_new_session=True)
        # Groups go down the pipe from the submitting thread itself, without a sender thread: waking a
        # thread costs the rollouts' thread GIL hand-offs. Under an event loop, what is submitted within
        # ``_SEND_EVERY_S`` goes in one non-blocking write (what does not fit waits for the next one);
        # without a loop, and on flush and close, it is written at once, waiting for room if need be.
        assert self._proc.stdin is not None
        self._fd = self._proc.stdin.fileno()
        os.set_blocking(self._fd, False)
        self._pending: list[bytes] = []
        self._lock = threading.Lock()
        self._scheduled = False
        self._closed = False
        self._receiver = threading.Thread(target=self._receive, name="workbench-writer-acks", daemon=True)
        self._receiver.start()

    def submit(self, records: list[RolloutRecord]) -> None:
        """Queue a group of rollouts; they are committed together, in one transaction."""
        if self.error is not None:
            raise self.error
        data = _group_payload(records)
        with self._lock:
            if self._closed:
                raise StoreError("the store's writer is closed")
            self._pending.append(data)
            if self._scheduled:
                return
            import asyncio  # here: the writer process, which imports this module too, needs no asyncio

            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # a plain caller: no loop to come back on
                self._write_pending()
                return
            self._scheduled = True
            loop.call_later(_SEND_EVERY_S, self._send_some, loop)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything submitted so far is committed."""
        with self._acked:
            self._flushes_sent += 1
            wanted = self._flushes_sent
            with self._lock:
                self._pending.append(pickle.dumps(_FLUSH))
                self._write_pending()
            self._acked.wait_for(lambda: self._flushes_done >= wanted or self._gone, timeout)
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._pending.append(pickle.dumps(_CLOSE))
                self._write_pending()
                assert self._proc.stdin is not None
                try:
                    self._proc.stdin.close()
                except OSError:
                    pass
        self._receiver.join()
        if self.error is not None:
            raise self.error

    def _send_some(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the event loop: write what the pipe takes now; come back later for the rest."""
        with self._lock:
            self._scheduled = False
            if self._closed or not self._pending:
                return
            data = b"".join(self._pending)
            try:
                n = os.write(self._fd, data)
            except BlockingIOError:
                n = 0
            except OSError:  # the writer process is gone: ``_receive`` reports why
                self._pending.clear()
                return
            self._pending = [data[n:]] if n < len(data) else []
            if self._pending:
                self._scheduled = True
                loop.call_later(_SEND_EVERY_S, self._send_some, loop)

    def _write_pending(self) -> None:
        """Write everything pending now, waiting for the pipe to take it (the lock is held)."""
        data = memoryview(b"".join(self._pending))
        self._pending = []
        room = select.poll()
        room.register(self._fd, select.POLLOUT)
        try:
            while data:
                try:
                    data = data[os.write(self._fd, data):]
                except BlockingIOError:
                    room.poll()
        except OSError:
            pass  # the writer process is gone: ``_receive`` reports why

    def _receive(self) -> None:
        """Take the writer process's acknowledgements until it exits."""
        acks = self._proc.stdout
        assert acks is not None
        try:
            while True:
                try:
                    kind, value = pickle.load(acks)
                except EOFError:
                    break
                if kind == "committed":
                    self.committed += value
                    self.batches += 1
                    if self.on_commit is not None:
                        self.on_commit(value)
                elif kind == "flushed":
                    with self._acked:
                        self._flushes_done += 1
                        self._acked.notify_all()
                elif self.error is None:
                    self.error = value
        except BaseException as e:  # on_commit raised, or a garbled acknowledgement: stop, as a failed commit does
            self.error = self.error or e
            self._proc.kill()
        code = self._proc.wait()
        with self._stderr:
            if code != 0 and self.error is None:
                self._stderr.seek(0)
                last = self._stderr.read().decode(errors="replace").strip().splitlines()[-1:]
                self.error = StoreError(f"the store's writer process stopped (exit code {code})"
                                        + (f": {last[0]}" if last else "") + "; rollouts not yet committed are lost")
        with self._acked:
            self._gone = True
            self._acked.notify_all()


def serve(path: str, max_batch: str, linger_s: str) -> None:
    """The writer process: commit the groups piped in by a ``BatchWriter`` and acknowledge each commit."""
    if hasattr(os, "nice"):
        os.nice(19)  # committing can wait a few milliseconds; the rollouts it stores should not
    acks = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print must not corrupt the acknowledgements
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    threading.Thread(target=_read_input, args=(inbox,), daemon=True).start()
    # Exit with os._exit: a normal interpreter teardown would abort on the daemon thread reading stdin.
    try:
        _commit_loop(Path(path), int(max_batch), float(linger_s), inbox, acks)
    except BaseException:
        traceback.print_exc()  # its last line becomes the eval's error
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)


def _read_input(inbox: queue.SimpleQueue[Any]) -> None:
    """Move what the eval process pipes in to ``inbox`` as it comes, so its pipe never fills up."""
    while True:
        try:
            item = pickle.load(sys.stdin.buffer)
        except Exception:  # the input ended without _CLOSE: the eval process died
            os._exit(1)  # abandon what is not committed, as a writer thread dies with its process
        inbox.put(item)
        if item == _CLOSE:
            return


def _commit_loop(path: Path, max_batch: int, linger_s: float, inbox: queue.SimpleQueue[Any], acks: IO[bytes]) -> None:
    conn = connect(path)
    failed = False
    stop = False
    while not stop:
        item = inbox.get()
        deadline = time.monotonic() + linger_s
        groups: list[tuple[int, bytes, list[Any] | None]] = []
        flushes = 0
        n = 0
        while True:
            if item == _CLOSE:
                stop = True
            elif item == _FLUSH:
                flushes += 1
            else:
                groups.append(item)
                n += item[0]
            if stop or n >= max_batch or flushes:
                break
            # Linger briefly so a busy run commits few large transactions instead of many small
            # ones (each costs a BEGIN, index work setup and a WAL frame): this bounds how much a
            # crash can lose to ``linger_s`` of finished rollouts.
            wait = deadline - time.monotonic() if n else 0.0
            try:
                item = inbox.get(timeout=wait) if wait > 0 else inbox.get_nowait()
            except queue.Empty:
                break
        if groups and not failed:
            try:
                acks.write(pickle.dumps(("committed", _write(conn, groups))))
            except BaseException as e:  # disk full, locked past timeout, ...
                failed = True
                acks.write(pickle.dumps(("error", _store_error(e, path))))
        for _ in range(flushes):
            acks.write(pickle.dumps(("flushed", None)))
        acks.flush()
    conn.close()
    acks.close()


def _store_error(e: BaseException, path: str | Path) -> BaseException:
    """A failed commit as one clear :class:`StoreError` (what went wrong, that what was committed is kept,
    and what to do); anything that is not SQLite's is passed on as it is, when it survives pickling."""
    import sqlite3

    if isinstance(e, sqlite3.Error) and not isinstance(e, sqlite3.IntegrityError):  # a constraint: a bug, as is
        text = str(e)
        if "full" in text:
            why = f"the disk holding the store {path} is full"
        elif "readonly" in text or "read-only" in text:
            why = f"the store {path} became read-only"
        else:
            why = f"writing rollouts to the store {path} failed ({type(e).__name__}: {text})"
        return StoreError(f"{why}; the groups committed before are kept: free the space or fix the store, then "
                          "finish the run with `workbench eval --resume RUN`")
    try:
        return pickle.loads(pickle.dumps(e))
    except Exception:
        return StoreError(f"writing rollouts failed: {type(e).__name__}: {e}")
