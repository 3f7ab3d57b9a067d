"""The store side of ``workbench import``: an imported run and its rollouts, written in bulk.

An import is one transaction: the run row (its config holds the file, the format and the content
hash of the file), every rollout (``source = 'imported'``), its scores and its full-text entry. So an
import is either whole in the store or absent, and the check that the same file was not imported
before happens under the same write lock as the insert: importing a file twice never doubles it.

The transaction is made by a writer process, as an eval's rollouts are (``writer.py``): the importing
process reads the file and turns each chunk of conversations into finished rows (JSON encoded, search
text made), and pipes them over; the writer process only runs ``executemany``. Reading and SQLite's
work then overlap on two cores, which is what makes a large file import at over 20,000 conversations
a second. If the importing process dies, the writer process sees its input end and rolls back.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from workbench.errors import StoreError

_COLS = ("pk, id, run_id, env_name, model, task_id, task_index, sample_index, status, error_kind, reward, "
         "prompt_tokens, completion_tokens, cost_usd, duration_s, turns, created_at, prompt, answer, info, "
         "completion, messages, state, source")
_ROLLOUT_SQL = f"INSERT INTO rollout ({_COLS}) VALUES ({', '.join('?' * 24)})"
_SCORE_SQL = "INSERT INTO score (rollout_pk, name, kind, value) VALUES (?, ?, ?, ?)"
_FTS_SQL = "INSERT INTO rollout_fts (rowid, text) VALUES (?, ?)"
_CHUNK = 2048
_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
# The writer process: this package's root, then the store. ``workbench`` and ``workbench.store`` are put
# in place without their ``__init__`` (as writer.py's process does): it needs this module and db.py only.
_CHILD = (
    "import sys, types\n"
    "for name in ('workbench', 'workbench.store'):\n"
    "    pkg = types.ModuleType(name); pkg.__path__ = [sys.argv[1] + '/' + name.replace('.', '/')]\n"
    "    sys.modules[name] = pkg\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from workbench.store.imports import serve\n"
    "serve(sys.argv[2])\n"
)


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj, option=_OPTS, default=repr).decode()


@dataclass(slots=True)
class ImportRow:
    """One imported rollout, ready for the store (JSON fields already encoded where noted)."""

    task_id: str
    task_index: int
    sample_index: int
    reward: float | None
    prompt: str  # JSON
    answer: str  # JSON
    info: str  # JSON
    completion: str
    messages: str  # JSON
    search: str  # the full-text index's text of the messages
    state: str  # JSON
    turns: int
    rewards: dict[str, float]
    metrics: dict[str, float]
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    duration_s: float = 0.0


def find_import(conn: sqlite3.Connection, sha256: str) -> str | None:
    """The run that imported content with this hash, if any."""
    row = conn.execute("SELECT id FROM run WHERE kind = 'import' AND json_extract(config, '$.import.sha256') = ? "
                       "ORDER BY created_at LIMIT 1", (sha256,)).fetchone()
    return None if row is None else row[0]


class AlreadyImported(Exception):
    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id


class NothingToImport(Exception):
    """``finish`` found no rollouts: the writer process rolls the run back."""


def _chunks(rows: Iterable[ImportRow]) -> Iterator[list[ImportRow]]:
    chunk: list[ImportRow] = []
    for r in rows:
        chunk.append(r)
        if len(chunk) >= _CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _params(chunk: list[ImportRow], pk: int, run_id: str, env_name: str, now: float) -> tuple[list, list, list]:
    """A chunk as the parameters of its rollout, score and full-text inserts, its rows numbered from ``pk + 1``."""
    rollouts, scores, fts = [], [], []
    for r in chunk:
        pk += 1
        rollouts.append((pk, f"{run_id}.{r.task_index}.{r.sample_index}", run_id, env_name, r.model, r.task_id,
                         r.task_index, r.sample_index, "ok", None, r.reward, r.prompt_tokens, r.completion_tokens,
                         0.0, r.duration_s, r.turns, now, r.prompt, r.answer, r.info, r.completion,
                         r.messages, r.state, "imported"))
        if r.rewards:
            scores += [(pk, name, "reward", v) for name, v in r.rewards.items()]
        if r.metrics:
            scores += [(pk, name, "metric", v) for name, v in r.metrics.items()]
        fts.append((pk, r.search))
    return rollouts, scores, fts


def write_import(path: Path, run: dict[str, Any], sha256: str, rows: Iterable[ImportRow], finish: Any) -> int:
    """Insert the run ``run`` (a row of column values, ``id`` included) and its ``rows`` into the store
    at ``path`` in one transaction, unless content with ``sha256`` was imported already
    (:class:`AlreadyImported`). ``finish(n)`` returns the columns to update on the run once its ``n``
    rollouts are in (its summary, status), or raises to roll everything back. Returns ``n``."""
    root = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(root), str(Path(path).resolve())],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, start_new_session=True)
        assert proc.stdin is not None and proc.stdout is not None
        n = 0
        # What an import allocates is JSON trees, which hold no cycles: the cyclic collector would only walk
        # each chunk's objects again and again while it lives (a tenth of the reading side's time).
        collecting = gc.isenabled()
        gc.disable()
        try:
            try:
                pickle.dump(("begin", run, sha256), proc.stdin, pickle.HIGHEST_PROTOCOL)
                proc.stdin.flush()
                # the writer holds the store's write lock now: the rows it numbers from pk + 1 are ours
                ready = _answer(proc.stdout)
                if ready is None or ready[0] != "ready":
                    raise _Stopped(ready)
                pk = ready[1]
                now = time.time()
                for chunk in _chunks(rows):
                    pickle.dump(("rows", *_params(chunk, pk, run["id"], run["env_name"], now)),
                                proc.stdin, pickle.HIGHEST_PROTOCOL)
                    pk += len(chunk)
                    n += len(chunk)
                fields = finish(n)
                fields = {k: (_dumps(v) if isinstance(v, dict | list) else v) for k, v in (fields or {}).items()}
                pickle.dump(("finish", fields), proc.stdin, pickle.HIGHEST_PROTOCOL)
                proc.stdin.close()
            except BrokenPipeError:  # the writer process stopped: its answer (if it gave one) says why
                with contextlib.suppress(OSError):
                    proc.stdin.close()
                answer = _answer(proc.stdout)
            except _Stopped as e:
                answer = e.answer
            else:
                answer = _answer(proc.stdout)
        except BaseException:
            proc.kill()  # uncommitted: killing it rolls the transaction back
            proc.wait()
            raise
        finally:
            if collecting:
                gc.enable()
        code = proc.wait()
        if answer is None:
            err.seek(0)
            last = err.read().decode(errors="replace").strip().splitlines()[-1:]
            raise StoreError(f"the store's import writer stopped (exit code {code})" + (f": {last[0]}" if last else "")
                             + "; nothing was imported")
    kind, value = answer
    if kind == "already":
        raise AlreadyImported(value)
    if kind == "error":
        raise StoreError(f"importing into the store {path} failed ({value}); nothing was imported")
    return n


class _Stopped(Exception):
    """The writer process answered ``begin`` with anything but ready (already imported, an error, nothing)."""

    def __init__(self, answer: tuple[str, Any] | None) -> None:
        super().__init__(answer)
        self.answer = answer


def _answer(stream: IO[bytes]) -> tuple[str, Any] | None:
    try:
        return pickle.load(stream)
    except (EOFError, pickle.UnpicklingError):  # the writer process stopped before it answered
        return None


# -- the writer process -----------------------------------------------------------------------------------
def serve(path: str) -> None:
    """Apply one import piped in by :func:`write_import`, then answer ("ok", n), ("already", run) or ("error", why)."""
    from workbench.store.db import connect

    gc.disable()  # it only unpickles rows and hands them to SQLite: nothing it makes holds a cycle
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print must not corrupt the answer
    conn = connect(Path(path))
    conn.execute("PRAGMA cache_size=-262144")  # 256 MiB: the rollout indexes and the text index stay in memory
    inp = sys.stdin.buffer
    answer: tuple[str, Any]
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            answer = _apply(conn, inp, out)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except (EOFError, pickle.UnpicklingError):  # the importing process stopped before its end: nothing kept
        os._exit(1)
    except sqlite3.Error as e:
        answer = ("error", f"{type(e).__name__}: {e}")
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    pickle.dump(answer, out)
    out.flush()
    conn.close()
    os._exit(0)


def _apply(conn: sqlite3.Connection, inp: IO[bytes], out: IO[bytes]) -> tuple[str, Any]:
    kind, run, sha256 = pickle.load(inp)
    assert kind == "begin"
    if (prior := find_import(conn, sha256)) is not None:
        conn.execute("ROLLBACK")
        return ("already", prior)
    conn.execute(f"INSERT INTO run ({', '.join(run)}) VALUES ({', '.join('?' * len(run))})", tuple(run.values()))
    pk = conn.execute("SELECT COALESCE(MAX(pk), 0) FROM rollout").fetchone()[0]
    pickle.dump(("ready", pk), out)
    out.flush()
    n = 0
    while True:
        item = pickle.load(inp)
        if item[0] == "finish":
            fields = item[1]
            if fields:
                conn.execute(f"UPDATE run SET {', '.join(f'{k}=?' for k in fields)} WHERE id=?",
                             (*fields.values(), run["id"]))
            conn.execute("COMMIT")
            return ("ok", n)
        _, rollouts, scores, fts = item
        conn.executemany(_ROLLOUT_SQL, rollouts)
        if scores:
            conn.executemany(_SCORE_SQL, scores)
        conn.executemany(_FTS_SQL, fts)
        n += len(rollouts)
