"""The store's read side for the trace browser and the CLI: filter, sort, page, count, fetch.

Every function takes a ``sqlite3.Connection`` (any row factory; nothing here writes) and stays in
milliseconds on a 1,000,000-rollout store with the indexes of migration v1.

Order. ``created`` is store order: pk, which the writer assigns at commit, so it follows creation
time to within one writer batch. ``reward`` puts rollouts without a reward (failed ones) first,
``-reward`` puts them last. Ties break on pk, so the order is total and keyset paging is exact:
pass ``after=row.cursor(sort)`` for the next page (constant cost at any depth); ``offset`` works too
but costs grow with it.

Finding a page. Along each stretch of the order the code *walks* an index that already yields it
(the table for pk; ix_rollout_model, ix_rollout_error_kind or the FTS doclist for pk under an
equality; ix_rollout_reward or ix_rollout_run_reward for reward) and tests the other filters row
by row, for a bounded number of rows. When the filters match too rarely there (or their rows lie
elsewhere in the order) it *gathers* instead: it reads the smallest filtered set through its own
index (sizes from capped counts) and sorts that.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sqlite3
from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import NotFoundError

Cursor = tuple[float | int | None, int]  # (sort key of the last row shown, its pk)
SORTS = ("created", "-created", "reward", "-reward", "duration", "-duration")
_SORT_COL = {"created": "pk", "reward": "reward", "duration": "duration_s"}
_PROBE_CAP = 20_000  # index entries a capped count reads at most
_TEXT_CAP = 100_000  # FTS matches counted at most before text is tested per row instead
_WALK = 2_048  # rows walked before gathering is considered
_LIGHT = ("pk, id, run_id, env_name, model, task_index, sample_index, status, error_kind, reward, turns, "
          "duration_s, created_at, substr(completion, 1, 120)")


@dataclass(slots=True)
class RolloutFilter:
    env: str | None = None
    run_id: str | None = None
    model: str | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    error_kind: str | None = None  # a kind, "any" (failed rollouts) or "none" (rollouts that did not fail)
    status: str | None = None
    text: str | None = None  # words that must all occur in the messages; "a phrase" and prefix* work
    sort: str = "created"  # one of SORTS


@dataclass(frozen=True, slots=True)
class RolloutSummary:
    pk: int
    id: str
    run_id: str
    env_name: str
    model: str
    task_index: int
    sample_index: int
    status: str
    error_kind: str | None
    reward: float | None
    turns: int
    duration_s: float
    created_at: float
    preview: str  # the completion's first 120 characters

    def cursor(self, sort: str = "created") -> Cursor:
        """The keyset cursor to pass as ``after`` for the page that follows this row."""
        col = _sort_col(sort)
        return (self.pk if col == "pk" else getattr(self, col), self.pk)


def fts_query(text: str | None) -> str | None:
    """User text as a safe FTS5 query: each word or "phrase" quoted (a trailing * keeps prefix
    search), all of them required. None when nothing searchable is left."""
    terms = []
    for phrase, word in re.findall(r'"([^"]*)"?|(\S+)', text or ""):
        star = bool(word) and word.endswith("*")
        t = phrase or word.rstrip("*")
        if any(ch.isalnum() for ch in t):
            terms.append('"' + t.replace('"', '""') + '"' + ("*" if star else ""))
    return " ".join(terms) or None


@dataclass(frozen=True, slots=True)
class _Pred:
    kind: str  # env | run | model | reward | error | error_any | text | other
    sql: str  # "{p}" marks where a unary plus keeps SQLite off the column's index
    args: tuple[Any, ...]


def _sort_col(sort: str) -> str:
    if sort not in SORTS:
        raise ValueError(f"unknown sort {sort!r}; use one of {', '.join(SORTS)}")
    return _SORT_COL[sort.lstrip("-")]


def _cur(conn: sqlite3.Connection) -> sqlite3.Cursor:
    cur = conn.cursor()
    cur.row_factory = None
    return cur


class _Query:
    """One filter, planned against one connection; probes are counted once and cached."""

    def __init__(self, conn: sqlite3.Connection, f: RolloutFilter) -> None:
        self.cur, self.f = _cur(conn), f
        self.col = _sort_col(f.sort)
        self.desc = f.sort.startswith("-")
        self.text = fts_query(f.text)
        self._sizes: dict[str, int] = {}
        ps: list[_Pred] = []
        for kind, col, val in (("env", "env_name", f.env), ("run", "run_id", f.run_id), ("model", "model", f.model),
                               ("other", "status", f.status)):
            if val is not None:
                ps.append(_Pred(kind, f"{{p}}r.{col} = ?", (val,)))
        if f.min_reward is not None or f.max_reward is not None:
            lo = -math.inf if f.min_reward is None else f.min_reward
            hi = math.inf if f.max_reward is None else f.max_reward
            ps.append(_Pred("reward", "{p}r.reward BETWEEN ? AND ?", (lo, hi)))
        if f.error_kind == "any":
            ps.append(_Pred("error_any", "{p}r.error_kind IS NOT NULL", ()))
        elif f.error_kind == "none":
            ps.append(_Pred("other", "r.error_kind IS NULL", ()))
        elif f.error_kind is not None:
            ps.append(_Pred("error", "{p}r.error_kind = ?", (f.error_kind,)))
        if self.text:
            ps.append(_Pred("text", "", (self.text,)))  # its SQL depends on how common the words are
        self.preds = ps

    def where(self, p: _Pred, plus: bool) -> str:
        if p.kind != "text":
            return p.sql.format(p="+" if plus else "")
        if self.size("text") >= _TEXT_CAP:  # too many rows to list: probe the index row by row
            return "EXISTS (SELECT 1 FROM rollout_fts WHERE rollout_fts MATCH ? AND rowid = r.pk)"
        return f"{'+' if plus else ''}r.pk IN (SELECT rowid FROM rollout_fts WHERE rollout_fts MATCH ?)"

    def pred(self, kind: str) -> _Pred | None:
        return next((p for p in self.preds if p.kind == kind), None)

    def size(self, kind: str) -> int:
        """Rows matching one indexed filter, counted up to a cap (so at most a few ms)."""
        if kind not in self._sizes:
            if kind == "text":
                sql, args = "SELECT 1 FROM rollout_fts WHERE rollout_fts MATCH ?", (self.text,)
                cap = _TEXT_CAP
            else:
                group = self.group(kind)
                sql = "SELECT 1 FROM rollout r WHERE " + " AND ".join(self.where(p, False) for p in group)
                args, cap = tuple(a for p in group for a in p.args), _PROBE_CAP
            self._sizes[kind] = self.cur.execute(f"SELECT COUNT(*) FROM ({sql} LIMIT ?)", (*args, cap)).fetchone()[0]
        return self._sizes[kind]

    def group(self, kind: str) -> list[_Pred]:
        """The filters one index serves together with ``kind`` (a run's rewards share its index)."""
        kinds = {kind, "reward"} if kind == "run" else {kind}
        return [p for p in self.preds if p.kind in kinds]

    def smallest(self, exclude: list[_Pred]) -> tuple[str, int] | None:
        kinds = [p.kind for p in self.preds if p.kind != "other" and p not in exclude]
        sized = sorted((min(self.size(k), _PROBE_CAP), k) for k in kinds)
        return (sized[0][1], sized[0][0]) if sized else None

    def _from(self, driver: str | None) -> str:
        return ("rollout_fts CROSS JOIN rollout r ON r.pk = rollout_fts.rowid" if driver == "text"
                else "rollout r")

    def _where(self, range_sql: str, range_args: tuple[Any, ...], drivers: list[_Pred], plus_range: bool,
               driver: str | None) -> tuple[str, list[Any]]:
        parts, args = [range_sql.format(p="+" if plus_range else "")], list(range_args)
        if driver == "text":
            parts.append("rollout_fts MATCH ?")
            args.append(self.text)
        for p in drivers:
            parts.append(self.where(p, False))
            args.extend(p.args)
        return " AND ".join(parts), args

    # -- paging ---------------------------------------------------------------------------------
    def segments(self) -> list[str]:
        if self.col == "pk":
            return ["pk"]
        segs = [self.col] if self.col != "reward" or self.pred("reward") else ["null", "reward"]
        return segs[::-1] if self.desc else segs

    def ranges(self, seg: str, cursor: Cursor | None) -> list[tuple[str, tuple[Any, ...], str]]:
        """(where, args, order by) stretches of segment ``seg`` strictly after ``cursor``, in order."""
        d, gt = (" DESC", "<") if self.desc else ("", ">")
        if seg in ("pk", "null"):
            base = "{p}r.reward IS NULL" if seg == "null" else "1"
            if cursor is None:
                return [(base, (), f"r.pk{d}")]
            return [(f"{base} AND {{p}}r.pk {gt} ?", (cursor[1],), f"r.pk{d}")]
        col = f"r.{seg}"
        if cursor is None:
            return [(f"{{p}}{col} IS NOT NULL", (), f"{col}{d}, r.pk{d}")]
        return [(f"{{p}}{col} = ? AND {{p}}r.pk {gt} ?", cursor, f"r.pk{d}"),
                (f"{{p}}{col} {gt} ?", (cursor[0],), f"{col}{d}, r.pk{d}")]

    def walk_drivers(self, seg: str) -> tuple[list[_Pred], str | None]:
        """Filters whose index yields segment ``seg`` in order (walked), and whether FTS leads."""
        if seg == "pk":
            for kind in ("error", "text", "model"):
                p = self.pred(kind)
                if p is not None:
                    return ([] if kind == "text" else [p]), ("text" if kind == "text" else None)
            return [], None
        if seg in ("null", "reward"):
            return [p for p in self.preds if p.kind in ("run", "reward")], None
        return [], None

    def page(self, need: int, after: Cursor | None) -> list[Cursor]:
        segs = self.segments()
        start = 0
        if after is not None and len(segs) > 1:
            start = segs.index("null" if after[0] is None else "reward")
        elif after is not None and self.col == "reward" and after[0] is None:  # NULL cursor, NULLs filtered out
            return [] if self.desc else self.page(need, None)
        out: list[Cursor] = []
        for i in range(start, len(segs)):
            out += self.segment(segs[i], after if i == start else None, need - len(out))
            if len(out) >= need:
                break
        return out[:need]

    def segment(self, seg: str, cursor: Cursor | None, need: int) -> list[Cursor]:
        drivers, lead = self.walk_drivers(seg)
        residual = [p for p in self.preds if p not in drivers and not (lead == "text" and p.kind == "text")]
        if seg == "duration_s" and not _has_index(self.cur, "duration_s"):
            gather = self.smallest([])  # no index yields this order: sort the smallest filtered set
            return self.gather(seg, cursor, gather[0] if gather else None, need)
        out: list[Cursor] = []
        budget = _WALK
        while True:
            got, cursor, done = self.walk(seg, cursor, drivers, lead, residual, need - len(out), budget)
            out += got
            if done:
                return out
            rate = len(got) / budget
            est = (need - len(out)) / rate if rate else math.inf
            best = self.smallest(drivers)
            if best is not None and best[1] < est:
                return out + self.gather(seg, cursor, best[0], need - len(out))
            budget = int(min(max(budget * 4, est * 1.5), 1 << 22))

    def walk(self, seg: str, cursor: Cursor | None, drivers: list[_Pred], lead: str | None,
             residual: list[_Pred], need: int, budget: int) -> tuple[list[Cursor], Cursor | None, bool]:
        """Walk ``seg`` in order for up to ``budget`` rows; (matches, last row walked, finished)."""
        flag = " AND ".join(f"({self.where(p, True)})" for p in residual) or "1"
        fargs = [a for p in residual for a in p.args]
        key = "r.pk" if seg == "pk" else f"r.{self.col}"
        got: list[Cursor] = []
        walked = 0
        for rng, rargs, order in self.ranges(seg, cursor):
            if lead == "text":  # the doclist yields pk order itself
                rng, order = rng.replace("r.pk", "rollout_fts.rowid"), order.replace("r.pk", "rollout_fts.rowid")
            where, args = self._where(rng, rargs, drivers, False, lead)
            lim = need - len(got) if not residual else budget - walked
            rows = self.cur.execute(f"SELECT r.pk, {key}, {flag} FROM {self._from(lead)} WHERE {where} "
                                    f"ORDER BY {order} LIMIT ?", (*fargs, *args, lim)).fetchall()
            walked += len(rows)
            for pk, k, ok in rows:
                if ok:
                    got.append((k, pk))
                    if len(got) == need:
                        return got, None, True
            if rows:
                cursor = (rows[-1][1], rows[-1][0])
            if len(rows) == lim:  # budget spent inside this stretch
                return got, cursor, not residual
        return got, cursor, True

    def gather(self, seg: str, cursor: Cursor | None, driver: str | None, need: int) -> list[Cursor]:
        """Read the set one index gives for ``driver``, test the rest, sort, keep ``need``."""
        drivers = self.group(driver) if driver and driver != "text" else []
        others = [p for p in self.preds if p not in drivers and p.kind != driver]
        key = "r.pk" if seg == "pk" else f"r.{self.col}"
        out: list[Cursor] = []
        for rng, rargs, order in self.ranges(seg, cursor):
            where, args = self._where(rng, rargs, drivers, True, driver)
            for p in others:
                where += f" AND {self.where(p, True)}"
                args.extend(p.args)
            rows = self.cur.execute(f"SELECT r.pk, {key} FROM {self._from(driver)} WHERE {where} ORDER BY {order} "
                                    "LIMIT ?", (*args, need - len(out))).fetchall()
            out += [(k, pk) for pk, k in rows]
            if len(out) >= need:
                break
        return out

    # -- counting -------------------------------------------------------------------------------
    def count(self) -> int:
        if not self.preds:
            return self.cur.execute("SELECT COUNT(*) FROM rollout").fetchone()[0]
        if self.f.error_kind == "none":  # failed rows are few and indexed: count all, subtract those
            base = dataclasses.replace(self.f, error_kind=None)
            failed = dataclasses.replace(self.f, error_kind="any")
            return _Query(self.cur.connection, base).count() - _Query(self.cur.connection, failed).count()
        best = self.smallest([])
        driver = best[0] if best else None
        if driver == "text" and len(self.preds) == 1:
            return self.cur.execute("SELECT COUNT(*) FROM rollout_fts WHERE rollout_fts MATCH ?",
                                    (self.text,)).fetchone()[0]
        drivers = self.group(driver) if driver and driver != "text" else []
        where, args = self._where("1", (), drivers, False, driver)
        for p in self.preds:
            if p not in drivers and p.kind != driver:
                where += f" AND {self.where(p, True)}"
                args.extend(p.args)
        return self.cur.execute(f"SELECT COUNT(*) FROM {self._from(driver)} WHERE {where}", args).fetchone()[0]


def _has_index(cur: sqlite3.Cursor, col: str) -> bool:
    """Whether some index on rollout starts with ``col`` (ix_rollout_duration is not in v1)."""
    for (name,) in cur.execute("SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='rollout'").fetchall():
        first = cur.execute("SELECT name FROM pragma_index_info(?) WHERE seqno=0", (name,)).fetchone()
        if first and first[0] == col:
            return True
    return False


def count_rollouts(conn: sqlite3.Connection, f: RolloutFilter | None = None) -> int:
    """How many rollouts match ``f`` (exact; reads one index in most cases)."""
    return _Query(conn, f or RolloutFilter()).count()


def page_rollouts(conn: sqlite3.Connection, f: RolloutFilter | None = None, limit: int = 100, offset: int = 0,
                  after: Cursor | None = None) -> list[RolloutSummary]:
    """Up to ``limit`` rollouts matching ``f`` in ``f.sort`` order, skipping ``offset`` rows after
    ``after`` (a :meth:`RolloutSummary.cursor`; None starts at the top)."""
    if limit < 0 or offset < 0:
        raise ValueError("limit and offset must not be negative")
    if limit == 0:
        return []
    keys = _Query(conn, f or RolloutFilter()).page(offset + limit, after)[offset:]
    pks = [pk for _, pk in keys]
    cur, rows = _cur(conn), {}
    for i in range(0, len(pks), 500):
        chunk = pks[i:i + 500]
        for r in cur.execute(f"SELECT {_LIGHT} FROM rollout WHERE pk IN ({','.join('?' * len(chunk))})", chunk):
            rows[r[0]] = RolloutSummary(*r[:13], r[13] or "")
    return [rows[pk] for pk in pks if pk in rows]


def _loads(s: str | None, default: Any) -> Any:
    return default if not s else orjson.loads(s)


def get_rollout(conn: sqlite3.Connection, key: int | str) -> dict[str, Any]:
    """One rollout with parsed JSON fields, scores, model calls and errors, by pk, id or a unique
    prefix of the id."""
    cur = _cur(conn)
    cols = [r[1] for r in cur.execute("PRAGMA table_info(rollout)")]
    sel = f"SELECT {', '.join(cols)} FROM rollout"
    row = None
    if isinstance(key, int):
        row = cur.execute(f"{sel} WHERE pk = ?", (key,)).fetchone()
    else:
        key = key.strip()
        row = cur.execute(f"{sel} WHERE id = ?", (key,)).fetchone()
        if row is None and key.isdigit():
            row = cur.execute(f"{sel} WHERE pk = ?", (int(key),)).fetchone()
        if row is None and key:
            ids = [r[0] for r in cur.execute("SELECT id FROM rollout WHERE id >= ? ORDER BY id LIMIT 3", (key,))
                   if r[0].startswith(key)]
            if len(ids) > 1:
                more = ", ..." if len(ids) > 2 else ""
                raise NotFoundError(f"{key!r} matches several rollouts ({ids[0]}, {ids[1]}{more}); give more of the id")
            if ids:
                row = cur.execute(f"{sel} WHERE id = ?", (ids[0],)).fetchone()
    if row is None:
        raise NotFoundError(f"no rollout {key!r} in this store; rollout ids look like RUN.TASK.SAMPLE "
                            "(`workbench show RUN` lists a run's rollouts)")
    d = dict(zip(cols, row, strict=True))
    for k, default in (("prompt", ""), ("answer", None), ("info", {}), ("messages", []), ("state", {})):
        d[k] = _loads(d[k], default)
    pk = d["pk"]
    d["rewards"], d["metrics"] = {}, {}
    for name, kind, value in cur.execute("SELECT name, kind, value FROM score WHERE rollout_pk = ? ORDER BY id", (pk,)):
        d["rewards" if kind == "reward" else "metrics"][name] = value
    d["calls"] = [{"index": i, "n_messages": n, "finish_reason": fr, "prompt_tokens": pt, "completion_tokens": ct,
                   "latency_ms": lat, "extra": _loads(x, None)}
                  for i, n, fr, pt, ct, lat, x in cur.execute(
                      "SELECT idx, n_messages, finish_reason, prompt_tokens, completion_tokens, latency_ms, extra "
                      "FROM model_call WHERE rollout_pk = ? ORDER BY idx, id", (pk,))]
    d["errors"] = [{"kind": k, "source": s, "message": m} for k, s, m in cur.execute(
        "SELECT kind, source, message FROM rollout_error WHERE rollout_pk = ? ORDER BY id", (pk,))]
    return d


def list_runs(conn: sqlite3.Connection, limit: int = 50, env: str | None = None) -> list[dict[str, Any]]:
    """Runs newest first with rollouts, errors and mean reward: from the summary a finished run
    stored, else counted on ix_rollout_run_reward (errors are the rollouts without a reward, which
    is how the engine stores failures)."""
    cur = _cur(conn)
    cols = ("id", "kind", "env_name", "env_version", "model", "status", "error", "n_tasks", "rollouts_per_task",
            "created_at", "finished_at", "summary")
    where, args = ("WHERE env_name = ?", [env]) if env is not None else ("", [])
    runs = []
    for row in cur.execute(f"SELECT {', '.join(cols)} FROM run {where} ORDER BY created_at DESC LIMIT ?",
                           (*args, limit)).fetchall():
        r = dict(zip(cols, row, strict=True))
        summary = _loads(r.pop("summary"), {})
        if r["status"] in ("completed", "failed", "interrupted") and {"rollouts", "errors", "mean_reward"} <= summary.keys():
            r.update(rollouts=summary["rollouts"], errors=summary["errors"], mean_reward=summary["mean_reward"])
        else:
            n, scored, mean = cur.execute("SELECT COUNT(*), COUNT(reward), AVG(reward) FROM rollout WHERE run_id = ?",
                                          (r["id"],)).fetchone()
            r.update(rollouts=n, errors=n - scored, mean_reward=mean)
        runs.append(r)
    return runs


_DISTINCT = {"env": "env_name", "env_name": "env_name", "model": "model", "error_kind": "error_kind",
             "run": "run_id", "run_id": "run_id"}


def distinct_values(conn: sqlite3.Connection, column: str) -> list[str]:
    """The distinct values of an indexed rollout column (env, model, error_kind, run_id), sorted;
    one index seek per value (a skip scan), so it costs nothing on a large store."""
    col = _DISTINCT.get(column)
    if col is None:
        raise ValueError(f"distinct_values supports {', '.join(sorted(_DISTINCT))}, not {column!r}")
    sql = (f"WITH RECURSIVE v(x) AS (SELECT (SELECT {col} FROM rollout WHERE {col} IS NOT NULL ORDER BY {col} LIMIT 1) "
           f"UNION ALL SELECT (SELECT {col} FROM rollout WHERE {col} > v.x ORDER BY {col} LIMIT 1) FROM v "
           "WHERE v.x IS NOT NULL) SELECT x FROM v WHERE x IS NOT NULL")
    return [r[0] for r in _cur(conn).execute(sql)]
