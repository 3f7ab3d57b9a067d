"""The rows a batch of rollouts becomes, and how the writer process inserts them (see ``writer.py``)."""

from __future__ import annotations

import math
import sqlite3
import time
from collections import defaultdict
from typing import Any

import orjson

from workbench.config.redact import redact
from workbench.records.rollout import searchable_text

_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def dumps(obj: Any) -> str:
    return orjson.dumps(obj, option=_OPTS, default=repr).decode()


_ROLLOUT_COLS = (
    "pk, id, run_id, env_name, model, task_id, task_index, sample_index, status, error_kind, reward, "
    "prompt_tokens, completion_tokens, cost_usd, duration_s, turns, created_at, prompt, answer, info, "
    "completion, messages, state, source"
)
_ROLLOUT_SQL = f"INSERT INTO rollout ({_ROLLOUT_COLS}) VALUES ({', '.join('?' * 24)})"
_SCORE_SQL = "INSERT INTO score (rollout_pk, name, kind, value) VALUES (?, ?, ?, ?)"
_CALL_SQL = (
    "INSERT INTO model_call (rollout_pk, idx, n_messages, finish_reason, prompt_tokens, completion_tokens, "
    "latency_ms, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_ERROR_SQL = "INSERT INTO rollout_error (rollout_pk, run_id, kind, source, message) VALUES (?, ?, ?, ?, ?)"
_TRACE_SQL = (
    "INSERT INTO trace (rollout_pk, nodes, token_ids, logprobs, mask, n_tokens, mismatches) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_FTS_SQL = "INSERT INTO rollout_fts (rowid, text) VALUES (?, ?)"
_COST_SQL = (
    "INSERT INTO cost_event (run_id, kind, provider, model, quantity, unit, usd, created_at) "
    "VALUES (?, 'api_tokens', ?, ?, ?, 'tokens', ?, ?)"
)


def _finite_or_none(value: Any) -> float | None:
    """A score as the store keeps it: a finite number, or None (orjson writes inf and NaN as null)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def _rollout_rows(groups: list[tuple[int, bytes, list[Any] | None]]) -> list[dict[str, Any]]:
    """Each rollout of the groups (``_group_payload``s) as the rows it becomes, before primary keys."""
    out: list[dict[str, Any]] = []
    for _, data, group_traces in groups:
        tasks, group = orjson.loads(data)
        task_json = {tid: (dumps(p), dumps(a), dumps(i)) for tid, (p, a, i) in tasks.items()}
        for k, (rid, run_id, env_name, model, task_id, task_index, sample_index, status, error_kind, reward,
                ptoks, ctoks, usd, duration_s, turns, created_at, completion, messages, state, rewards, metrics,
                r_calls, r_errors, provider, source) in enumerate(group):
            errors = [(kind, redact(where), redact(msg)) for kind, where, msg in r_errors]  # URLs without keys
            scores = []
            for kind, values in (("reward", rewards), ("metric", metrics)):
                for name, v in values.items():
                    f = _finite_or_none(v)
                    if f is None:  # scoring refuses these; a record made elsewhere is held to the same rule
                        errors.append(("reward", name, f"{name} is not a finite number; not stored as a score"))
                    else:
                        scores.append((name, kind, f))
            out.append({
                "rollout": [rid, run_id, env_name, model, task_id, task_index, sample_index, status, error_kind,
                            _finite_or_none(reward) if reward is not None else None, ptoks, ctoks, usd,
                            duration_s, turns, created_at, *task_json[task_id], completion, dumps(messages),
                            dumps(state), source],
                "scores": scores,
                "calls": [(*c[:6], dumps(c[6]) if c[6] is not None else None) for c in r_calls],
                "errors": [(run_id, *e) for e in errors],
                "trace": group_traces[k] if group_traces is not None else None,
                "fts": searchable_text(messages),
                "cost": (run_id, provider, model, ptoks + ctoks, usd) if (ptoks or ctoks or usd) else None,
            })
    return out


#: What a row the store refuses raises (a constraint, a value SQLite cannot hold), as against the
#: store itself failing (a full disk, a lock), which stops the writer.
_ROW_ERRORS: tuple[type[BaseException], ...] = (
    sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.DataError, OverflowError, ValueError, TypeError)


def _write(conn: Any, groups: list[tuple[int, bytes, list[Any] | None]]) -> int:
    """Insert the groups (``_group_payload``s) in one transaction; return how many rollouts that was.

    A row the store refuses never costs the batch: the batch is written again one rollout at a time
    (each behind a savepoint, still one transaction), and a rollout refused on its own is kept bare
    (its slot, status ``error`` and the reason, without its details), so its group stays whole and
    the run counts it. Only a rollout refused even bare (its slot already taken: a bug) fails the batch."""
    rows = _rollout_rows(groups)
    conn.execute("BEGIN IMMEDIATE")
    try:
        try:
            conn.execute("SAVEPOINT batch")
            _insert(conn, rows)
            conn.execute("RELEASE batch")
        except _ROW_ERRORS:
            conn.execute("ROLLBACK TO batch")
            conn.execute("RELEASE batch")
            for row in rows:
                conn.execute("SAVEPOINT one")
                try:
                    _insert(conn, [row])
                except _ROW_ERRORS as e:
                    conn.execute("ROLLBACK TO one")
                    _insert(conn, [_bare(row, e)])
                conn.execute("RELEASE one")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # SQLite rolls a failed COMMIT (a full disk) back by itself
            conn.execute("ROLLBACK")
        raise
    return len(rows)


def _bare(row: dict[str, Any], e: BaseException) -> dict[str, Any]:
    """The rollout with only what any store takes: status error, no scores, calls, trace or usage."""
    r = list(row["rollout"])
    run_id = r[1]
    r[7], r[8], r[9] = "error", "store", None  # status, error_kind, reward
    r[10], r[11], r[12], r[13], r[14] = 0, 0, 0.0, 0.0, 0  # tokens, cost, duration, turns
    r[16], r[17], r[18], r[19], r[20], r[21] = dumps(str(r[16])[:10_000]), "null", "{}", "", "[]", "{}"
    reason = f"the store refused this rollout's details ({type(e).__name__}: {str(e)[:300]}); kept without them"
    return {"rollout": r, "scores": [], "calls": [], "errors": [(run_id, "store", "writer", reason)],
            "trace": None, "fts": "", "cost": None}


def _insert(conn: Any, rows: list[dict[str, Any]]) -> None:
    """Insert rollouts' rows (inside the caller's transaction)."""
    pk = conn.execute("SELECT COALESCE(MAX(pk), 0) FROM rollout").fetchone()[0]
    rollouts, scores, calls, errors, fts, traces = [], [], [], [], [], []
    cost: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        pk += 1
        rollouts.append((pk, *row["rollout"]))
        scores += [(pk, *sc) for sc in row["scores"]]
        calls += [(pk, *c) for c in row["calls"]]
        errors += [(pk, *e) for e in row["errors"]]
        if row["trace"] is not None:
            traces.append((pk, *row["trace"]))
        fts.append((pk, row["fts"]))
        if row["cost"] is not None:
            run_id, provider, model, tokens, usd = row["cost"]
            acc = cost[(run_id, provider, model)]
            acc[0] += tokens
            acc[1] += usd
    conn.executemany(_ROLLOUT_SQL, rollouts)
    if scores:
        conn.executemany(_SCORE_SQL, scores)
    if calls:
        conn.executemany(_CALL_SQL, calls)
    if errors:
        conn.executemany(_ERROR_SQL, errors)
    conn.executemany(_FTS_SQL, fts)
    if traces:
        conn.executemany(_TRACE_SQL, traces)
    if cost:
        now = time.time()
        conn.executemany(_COST_SQL, [(k[0], k[1], k[2], v[0], v[1], now) for k, v in cost.items()])
