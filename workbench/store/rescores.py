"""The store side of re-scoring: stored rollouts read back in whole groups, and re-score records.

Reading is batched: a run's rollouts come in chunks along ``ix_rollout_slot`` (run, task, sample),
cut at group boundaries, and their scores, model calls and traces by ``IN`` lists of pks, so 100k
rollouts cost a few hundred queries. A re-score record (schema v5) holds the new scores beside the
original ones, which nothing here changes.
"""

from __future__ import annotations

import sqlite3
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from workbench.records.rollout import ModelCall
from workbench.records.trace import Trace
from workbench.store.run_kinds import USER_KINDS
from workbench.store.run_listing import kinds_clause
from workbench.store.writer import dumps

Row = tuple[Any, ...]

#: The rollout columns a chunk row holds, in order (``ROW_*`` index them).
ROLLOUT_COLS = ("pk, id, run_id, model, task_id, task_index, sample_index, status, prompt, answer, info, messages, "
                "state, prompt_tokens, completion_tokens, cost_usd, turns, duration_s, reward, source")
ROW_PK, ROW_ID, ROW_RUN, ROW_TASK_INDEX, ROW_STATUS, ROW_REWARD, ROW_SOURCE = 0, 1, 2, 5, 7, 18, 19
_IN = 900  # values per SQL ``IN (...)`` list


def loads(s: str | bytes | None, default: Any) -> Any:
    return default if not s else orjson.loads(s)


def plain_cursor(conn: sqlite3.Connection) -> sqlite3.Cursor:
    """A cursor yielding plain tuples, whatever the connection's row factory."""
    cur = conn.cursor()
    cur.row_factory = None
    return cur


def env_runs(conn: sqlite3.Connection, env_name: str,
             kinds: Iterable[str] | None = USER_KINDS) -> list[tuple[str, dict[str, Any]]]:
    """(run id, the ``load_environment`` arguments it was made with) of every run of ``env_name`` of ``kinds``
    (None: every kind; by default the user's own, so a probe's runs are left out), oldest first."""
    clause, args = kinds_clause(kinds)
    return [(r[0], loads(r[1], {})) for r in plain_cursor(conn).execute(
        f"SELECT id, env_args FROM run WHERE env_name = ?{' AND ' + clause if clause else ''} ORDER BY created_at, id",
        (env_name, *args))]


def count_stored(conn: sqlite3.Connection, env_name: str, run_id: str | None = None,
                 kinds: Iterable[str] | None = USER_KINDS) -> int:
    """Stored rollouts of a run, or of every run of ``env_name`` of ``kinds`` (None: every kind)."""
    cur = plain_cursor(conn)
    if run_id is not None:
        return cur.execute("SELECT COUNT(*) FROM rollout WHERE run_id = ?", (run_id,)).fetchone()[0]
    clause, args = kinds_clause(kinds)
    if not clause:
        return cur.execute("SELECT COUNT(*) FROM rollout WHERE env_name = ?", (env_name,)).fetchone()[0]
    return sum(cur.execute("SELECT COUNT(*) FROM rollout WHERE run_id = ? AND env_name = ?", (rid, env_name)).fetchone()[0]
               for rid, _ in env_runs(conn, env_name, kinds))


def group_chunks(conn: sqlite3.Connection, run_id: str, env_name: str, size: int) -> Iterator[list[list[Row]]]:
    """A run's rollouts of ``env_name`` as chunks of about ``size`` rows, each a list of whole groups
    (the rollouts of one task, by sample), in task order. A group larger than ``size`` is one chunk."""
    cur = plain_cursor(conn)
    sql = (f"SELECT {ROLLOUT_COLS} FROM rollout WHERE run_id = ? AND task_index {{}} ? AND env_name = ? "
           "ORDER BY task_index, sample_index")
    after = -(1 << 62)
    while True:
        rows = cur.execute(sql.format(">") + " LIMIT ?", (run_id, after, env_name, size)).fetchall()
        if not rows:
            return
        full = len(rows) == size
        if full:  # the last group may go on past the chunk: it starts the next one
            last = rows[-1][ROW_TASK_INDEX]
            rows = [r for r in rows if r[ROW_TASK_INDEX] != last] or \
                cur.execute(sql.format("="), (run_id, last, env_name)).fetchall()
        groups: list[list[Row]] = []
        for r in rows:
            if groups and groups[-1][0][ROW_TASK_INDEX] == r[ROW_TASK_INDEX]:
                groups[-1].append(r)
            else:
                groups.append([r])
        yield groups
        if not full:
            return
        after = rows[-1][ROW_TASK_INDEX]


def _by_pk(conn: sqlite3.Connection, sql: str, pks: list[int]) -> Iterator[Row]:
    cur = plain_cursor(conn)
    for i in range(0, len(pks), _IN):
        part = pks[i:i + _IN]
        yield from cur.execute(sql.format(",".join("?" * len(part))), part)


def stored_scores(conn: sqlite3.Connection, pks: list[int]) -> tuple[dict[int, dict[str, float]], dict[str, str]]:
    """Each rollout's stored values by name, and each name's stored kind (reward | metric)."""
    values: dict[int, dict[str, float]] = defaultdict(dict)
    kinds: dict[str, str] = {}
    for pk, name, kind, value in _by_pk(conn, "SELECT rollout_pk, name, kind, value FROM score "
                                              "WHERE rollout_pk IN ({}) ORDER BY id", pks):
        values[pk][name] = value
        kinds[name] = kind
    return values, kinds


def stored_traces(conn: sqlite3.Connection, pks: list[int]) -> tuple[dict[int, Trace], dict[int, list[ModelCall]]]:
    """The token traces and model calls of rollouts (those that have them)."""
    traces = {pk: Trace.unpack(nodes, ids, lps, mask) for pk, nodes, ids, lps, mask in _by_pk(
        conn, "SELECT rollout_pk, nodes, token_ids, logprobs, mask FROM trace WHERE rollout_pk IN ({})", pks)}
    calls: dict[int, list[ModelCall]] = defaultdict(list)
    for pk, idx, n, fr, pt, ct, lat, extra in _by_pk(
            conn, "SELECT rollout_pk, idx, n_messages, finish_reason, prompt_tokens, completion_tokens, latency_ms, "
                  "extra FROM model_call WHERE rollout_pk IN ({}) ORDER BY rollout_pk, idx, id", pks):
        calls[pk].append(ModelCall(idx, n, None, fr, pt, ct, lat / 1000.0, extra=loads(extra, None)))
    return traces, calls


class RescoreRecord:
    """An applied re-score: created ``running``, filled one transaction per chunk, then finished."""

    def __init__(self, conn: sqlite3.Connection, env_name: str, env_version: str, run_id: str | None) -> None:
        self.conn = conn
        self.id: int = plain_cursor(conn).execute(
            "INSERT INTO rescore (env_name, env_version, run_id, status, rollouts, changed, created_at, summary) "
            "VALUES (?, ?, ?, 'running', 0, 0, ?, '{}')", (env_name, env_version, run_id, time.time())).lastrowid or 0

    def write(self, rows: list[tuple[int, float, str, str | None]]) -> None:
        """(rollout pk, new weighted total, scores JSON, errors JSON or None) rows, committed together."""
        if not rows:
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.executemany("INSERT INTO rescore_rollout (rescore_id, rollout_pk, reward, scores, errors) "
                                  "VALUES (?, ?, ?, ?, ?)", [(self.id, *r) for r in rows])
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def finish(self, status: str, rollouts: int, changed: int, summary: dict[str, Any]) -> None:
        self.conn.execute("UPDATE rescore SET status = ?, rollouts = ?, changed = ?, finished_at = ?, summary = ? "
                          "WHERE id = ?", (status, rollouts, changed, time.time(), dumps(summary), self.id))


def list_rescores(conn: sqlite3.Connection, env_name: str | None = None) -> list[dict[str, Any]]:
    """Applied re-score records, newest first, ``summary`` parsed."""
    cols = ("id", "env_name", "env_version", "run_id", "status", "rollouts", "changed", "created_at", "finished_at",
            "summary")
    where, args = (" WHERE env_name = ?", (env_name,)) if env_name is not None else ("", ())
    out = []
    for row in plain_cursor(conn).execute(f"SELECT {', '.join(cols)} FROM rescore{where} ORDER BY id DESC", args):
        d = dict(zip(cols, row, strict=True))
        d["summary"] = loads(d["summary"], {})
        out.append(d)
    return out


def rescored_scores(conn: sqlite3.Connection, rollout_pk: int) -> dict[str, Any] | None:
    """A rollout's scores in its latest completed re-score record (None when it has none):
    ``record_id``, ``env_version``, ``reward``, ``rewards``, ``metrics``, ``errors``."""
    row = plain_cursor(conn).execute(
        "SELECT rr.rescore_id, rr.reward, rr.scores, rr.errors, r.env_version FROM rescore_rollout rr "
        "JOIN rescore r ON r.id = rr.rescore_id WHERE rr.rollout_pk = ? AND r.status = 'completed' "
        "ORDER BY rr.rescore_id DESC LIMIT 1", (rollout_pk,)).fetchone()
    if row is None:
        return None
    rid, reward, scores, errors, version = row
    return {"record_id": rid, "env_version": version, "reward": reward, **orjson.loads(scores),
            "errors": [tuple(e) for e in loads(errors, [])]}
