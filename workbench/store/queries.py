"""The store's read side for the trace browser and the CLI: filter, sort, page, count, fetch.

Functions take a ``sqlite3.Connection`` (any row factory; nothing here writes). The run listing
(``list_runs``, in ``run_listing.py``) and one rollout in full (``get_rollout``, in ``rollout_detail.py``)
live beside and are imported from here too.

Order. ``created`` is store order (pk, assigned at commit, so creation order to within a writer
batch); ``reward`` puts rollouts without a reward (failed ones) first, ``-reward`` last. Ties break
on pk, so ``-x`` is the exact reverse of ``x`` and keyset paging (``after=row.cursor(sort)``) is
exact at constant cost at any depth. ``offset`` costs what skipping that many rows costs, except in
unfiltered store order with no gaps in pk (the usual case), where it is free.

A page: along each stretch of the order, *walk* an index that yields it (the table or the FTS
doclist for pk, ix_rollout_model / ix_rollout_error_kind for pk under an equality, ix_rollout_reward
/ ix_rollout_run_reward for reward), testing the other filters row by row; once the walk has cost
what *gathering* would (reading the cheapest filtered set through its index and sorting it), gather.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sqlite3
from dataclasses import dataclass
from typing import Any

from workbench.store.rollout_detail import (
    get_rollout as get_rollout,  # one rollout in full lives beside; callers import it here
)
from workbench.store.run_kinds import USER_KINDS
from workbench.store.run_listing import kinds_clause
from workbench.store.run_listing import (
    list_runs as list_runs,  # the listing lives beside; callers import it here
)

Cursor = tuple[float | int | None, int]  # (sort key of the last row shown, its pk)
SORTS = ("created", "-created", "reward", "-reward", "duration", "-duration")
_SORT_COL = {"created": "pk", "reward": "reward", "duration": "duration_s"}
_PROBE_CAP = 20_000  # index entries a capped count reads at most
_TEXT_CAP = 100_000  # FTS matches counted at most; text matching more is tested row by row
_WALK = 2_048  # rows walked before gathering is considered
_LIGHT = ("pk, id, run_id, env_name, model, task_index, sample_index, status, error_kind, reward, turns, "
          "duration_s, created_at, substr(completion, 1, 120)")
# Rough costs, in units of one row read while walking the table (~1 us warm): an index entry, a row
# looked up from an index listing rows in about pk order (all but reward's) or in random order
# (reward's), one row tested against the FTS index, one FTS match listed.
_C_ENTRY, _C_LOOKUP, _C_RANDOM, _C_FTS_ROW, _C_FTS_LIST = 0.1, 1.0, 3.0, 50.0, 0.3
_PRIOR = ("error", "error_any", "run", "text", "model", "source", "env", "reward", "kinds")  # on a tie: likelier smaller
_INDEX_COLS = {"env": {"env_name", "created_at"}, "run": {"run_id", "reward"}, "model": {"model"},
               "reward": {"reward"}, "error": {"error_kind"}, "error_any": {"error_kind"}, "text": set(),
               "source": {"source"}, "kinds": {"run_id", "reward"}}


@dataclass(slots=True)
class RolloutFilter:
    env: str | None = None
    run_id: str | None = None
    model: str | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    error_kind: str | None = None  # a kind, "any" (failed rollouts) or "none" (rollouts that did not fail)
    status: str | None = None  # not indexed: prefer error_kind "any" / "none"
    text: str | None = None  # words that must all occur in the messages; "a phrase" and prefix* work
    source: str | None = None  # where rollouts came from: model | imported | human (ix_rollout_source)
    sort: str = "created"  # one of SORTS
    # the kinds of run whose rollouts match (workbench.runs.kinds; None: every kind); with run_id, that run's
    kinds: tuple[str, ...] | None = USER_KINDS


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
    search), all required. None when nothing searchable is left."""
    terms = []
    for phrase, word in re.findall(r'"([^"]*)"?|(\S+)', text or ""):
        t = phrase or word.rstrip("*")
        if any(ch.isalnum() for ch in t):
            terms.append('"' + t.replace('"', '""') + '"' + ("*" if word.endswith("*") else ""))
    return " ".join(terms) or None


@dataclass(frozen=True, slots=True)
class _Pred:
    kind: str  # env | run | model | source | reward | error | error_any | text | other
    col: str  # the rollout column it tests ("" for text)
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
    """One filter planned against one connection; filtered-set sizes are probed once, when needed."""

    def __init__(self, conn: sqlite3.Connection, f: RolloutFilter) -> None:
        self.cur, self.f, self.col = _cur(conn), f, _sort_col(f.sort)
        self.desc, self.text = f.sort.startswith("-"), fts_query(f.text)
        self._sizes: dict[str, int] = {}
        ps = [_Pred(kind, col, f"{{p}}r.{col} = ?", (val,)) for kind, col, val in (
            ("env", "env_name", f.env), ("run", "run_id", f.run_id), ("model", "model", f.model),
            ("source", "source", f.source), ("other", "status", f.status)) if val is not None]
        if f.min_reward is not None or f.max_reward is not None:
            bounds = (-math.inf if f.min_reward is None else f.min_reward, math.inf if f.max_reward is None else f.max_reward)
            ps.append(_Pred("reward", "reward", "{p}r.reward BETWEEN ? AND ?", bounds))
        if f.error_kind == "any":
            ps.append(_Pred("error_any", "error_kind", "{p}r.error_kind IS NOT NULL", ()))
        elif f.error_kind == "none":
            ps.append(_Pred("other", "error_kind", "r.error_kind IS NULL", ()))
        elif f.error_kind is not None:
            ps.append(_Pred("error", "error_kind", "{p}r.error_kind = ?", (f.error_kind,)))
        kinds = self.kinds_pred(conn, f)
        if kinds is not None:
            ps.append(kinds)
        if self.text:
            ps.append(_Pred("text", "", "", (self.text,)))  # its SQL depends on how common the words are
        self.preds = ps

    @staticmethod
    def kinds_pred(conn: sqlite3.Connection, f: RolloutFilter) -> _Pred | None:
        """The run-kind filter, or None when it keeps every rollout: every kind asked for, one run asked for,
        or no run of another kind in the store (one seek on ix_run_kind_created)."""
        clause, args = kinds_clause(f.kinds)
        if not clause or f.run_id is not None:
            return None
        if clause != "0" and _cur(conn).execute(f"SELECT 1 FROM run WHERE NOT ({clause}) LIMIT 1", args).fetchone() is None:
            return None
        return _Pred("kinds", "run_id", f"{{p}}r.run_id IN (SELECT id FROM run WHERE {clause})", args)

    def fewer_other_kinds(self) -> tuple[str, ...] | None:
        """The kinds of the store's other runs, when the run-kind filter is not alone and those runs hold fewer
        rollouts than the runs it keeps (so testing each of its rows would cost more than subtracting)."""
        if self.pred("kinds") is None or len(self.preds) < 2 or self.f.kinds is None:
            return None
        stored = [k for (k,) in self.cur.execute("SELECT DISTINCT kind FROM run")]
        others = tuple(k for k in stored if k not in self.f.kinds)
        clause, args = kinds_clause(others)
        if not clause:
            return None
        sql = f"SELECT 1 FROM rollout r WHERE r.run_id IN (SELECT id FROM run WHERE {clause}) LIMIT ?"
        n = self.cur.execute(f"SELECT COUNT(*) FROM ({sql})", (*args, _PROBE_CAP)).fetchone()[0]
        return others if n < self.size("kinds") else None

    def common_text(self) -> bool:
        return self.text is not None and self.size("text") >= _TEXT_CAP

    def where(self, p: _Pred, plus: bool) -> str:
        if p.kind != "text":
            return p.sql.format(p="+" if plus else "")
        if self.common_text():  # too many to list: test each row against the index
            return "EXISTS (SELECT 1 FROM rollout_fts WHERE rollout_fts MATCH ? AND rowid = r.pk)"
        return f"{'+' if plus else ''}r.pk IN (SELECT rowid FROM rollout_fts WHERE rollout_fts MATCH ?)"

    def pred(self, kind: str) -> _Pred | None:
        return next((p for p in self.preds if p.kind == kind), None)

    def group(self, kind: str | None) -> list[_Pred]:
        """The filters one index serves together with ``kind`` (a run's rewards share its index)."""
        kinds = {kind, "reward"} if kind == "run" else {kind}
        return [p for p in self.preds if p.kind in kinds] if kind not in (None, "text") else []

    def size(self, kind: str) -> int:
        """Rows matching one indexed filter, counted up to a cap (so a few ms at most)."""
        if kind not in self._sizes:
            if kind == "text":
                sql, args, cap = "SELECT 1 FROM rollout_fts WHERE rollout_fts MATCH ?", (self.text,), _TEXT_CAP
            else:
                group = self.group(kind)
                sql = "SELECT 1 FROM rollout r WHERE " + " AND ".join(self.where(p, False) for p in group)
                args, cap = tuple(a for p in group for a in p.args), _PROBE_CAP
            self._sizes[kind] = self.cur.execute(f"SELECT COUNT(*) FROM ({sql} LIMIT ?)", (*args, cap)).fetchone()[0]
        return self._sizes[kind]

    def best_gather(self, seg: str, exclude: list[_Pred]) -> tuple[str | None, float]:
        """The cheapest index to gather ``seg`` from, and its estimated cost (inf when none applies)."""
        best: tuple[float, int, str | None] = (math.inf, 0, None)
        for p in self.preds:
            if p.kind == "other" or p in exclude:
                continue
            group = self.group(p.kind)
            others = [q for q in self.preds if q not in group and q.kind != p.kind]
            covered = {q.col for q in others} | {"pk" if seg == "pk" else self.col} <= _INDEX_COLS[p.kind] | {"pk"}
            per_row = _C_ENTRY if covered else _C_RANDOM if p.kind == "reward" else _C_LOOKUP
            cost = self.size(p.kind) * per_row
            if any(q.kind == "text" for q in others):
                cost += self.size(p.kind) * _C_FTS_ROW if self.common_text() else self.size("text") * _C_FTS_LIST
            best = min(best, (cost, _PRIOR.index(p.kind), p.kind))
        return best[2], best[0]

    def sql(self, select: str, rng: str, rargs: tuple[Any, ...], uses: list[_Pred], fts: bool,
            tests: list[_Pred], tail: str = "") -> tuple[str, list[Any]]:
        """A statement reading rollouts ``r`` (through the FTS doclist when ``fts``) in range ``rng``:
        the filters in ``uses`` may use their indexes, the other ``tests`` may not."""
        parts, args = [rng.format(p="")], list(rargs)
        if fts:
            parts.append("rollout_fts MATCH ?")
            args.append(self.text)
        for p, plus in [(p, False) for p in uses] + [(p, True) for p in tests if p not in uses]:
            parts.append(self.where(p, plus))
            args.extend(p.args)
        src = "rollout_fts CROSS JOIN rollout r ON r.pk = rollout_fts.rowid" if fts else "rollout r"
        return f"SELECT {select} FROM {src} WHERE {' AND '.join(parts)}{tail}", args

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
            return [(base, (), f"r.pk{d}")] if cursor is None else \
                [(f"{base} AND {{p}}r.pk {gt} ?", (cursor[1],), f"r.pk{d}")]
        col = f"r.{seg}"
        if cursor is None:
            return [(f"{{p}}{col} IS NOT NULL", (), f"{col}{d}, r.pk{d}")]
        return [(f"{{p}}{col} = ? AND {{p}}r.pk {gt} ?", cursor, f"r.pk{d}"),
                (f"{{p}}{col} {gt} ?", (cursor[0],), f"{col}{d}, r.pk{d}")]

    def page(self, need: int, after: Cursor | None) -> list[Cursor]:
        segs, start = self.segments(), 0
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
        indexes = _indexes(self.cur)
        if seg == "duration_s" and not any(cols[0] == seg for cols in indexes):  # nothing yields this order
            return self.gather(seg, cursor, self.best_gather(seg, [])[0], need)
        # under an equality on a column indexed alone, that index lists rows in pk order
        lead = next((p for k in ("error", "text", "model", "source", "env", "run") if (p := self.pred(k)) and
                     (k == "text" or [p.col] in indexes)), None) if seg == "pk" else None
        fts = lead is not None and lead.kind == "text"  # the doclist yields pk order itself
        uses = [] if seg == "duration_s" else [lead] if lead and not fts else [] if seg == "pk" else \
            [p for p in self.preds if p.kind in ("run", "reward")]  # ix_rollout_run_reward / ix_rollout_reward
        tests = [p for p in self.preds if p not in uses and p is not lead]
        c_row = 1.0 + (_C_FTS_ROW if any(p.kind == "text" for p in tests) and self.common_text() else 0.0)
        out: list[Cursor] = []
        budget, walked, spent = _WALK, 0, 0.0
        gather: tuple[str | None, float] | None = None
        while True:
            got, cursor, done, n = self.walk(seg, cursor, uses, fts, tests, need - len(out), budget)
            out, walked, spent = out + got, walked + n, spent + n * c_row
            if done:
                return out
            gather = gather or self.best_gather(seg, uses + ([lead] if lead else []))
            rows_left = (need - len(out)) * walked / len(out) if out else math.inf
            if rows_left * c_row <= gather[1]:  # the walk will find them soon: keep walking
                next_budget = rows_left * 1.5
            elif spent >= gather[1]:
                return out + self.gather(seg, cursor, gather[0], need - len(out))
            else:  # no telling yet: walk on until the walk has cost what gathering would
                next_budget = (gather[1] - spent) / c_row
            budget = int(min(max(next_budget, _WALK), 1 << 22))

    def walk(self, seg: str, cursor: Cursor | None, uses: list[_Pred], fts: bool, tests: list[_Pred], need: int,
             budget: int) -> tuple[list[Cursor], Cursor | None, bool, int]:
        """Walk ``seg`` in order for up to ``budget`` rows: (matches, last row seen, finished, rows)."""
        flag = " AND ".join(f"({self.where(p, True)})" for p in tests) or "1"
        key = "r.pk" if seg == "pk" else f"r.{self.col}"
        got: list[Cursor] = []
        walked = 0
        for rng, rargs, order in self.ranges(seg, cursor):
            if fts:
                rng, order = rng.replace("r.pk", "rollout_fts.rowid"), order.replace("r.pk", "rollout_fts.rowid")
            lim = budget - walked if tests else need - len(got)
            sql, args = self.sql(f"r.pk, {key}, {flag}", rng, rargs, uses, fts, [], f" ORDER BY {order} LIMIT ?")
            n = 0
            for pk, k, ok in self.cur.execute(sql, [a for p in tests for a in p.args] + args + [lim]):
                n, cursor = n + 1, (k, pk)
                if ok:
                    got.append((k, pk))
                    if len(got) == need:
                        return got, cursor, True, walked + n
            walked += n
            if n == lim:  # budget spent inside this stretch
                return got, cursor, not tests, walked
        return got, cursor, True, walked

    def gather(self, seg: str, cursor: Cursor | None, driver: str | None, need: int) -> list[Cursor]:
        """Read the set the index of ``driver`` gives, test the rest, sort, keep ``need``."""
        uses, key = self.group(driver), "r.pk" if seg == "pk" else f"r.{self.col}"
        tests = [p for p in self.preds if p.kind != driver]
        out: list[Cursor] = []
        for rng, rargs, order in self.ranges(seg, cursor):
            sql, args = self.sql(f"r.pk, {key}", rng.replace("{p}", "+"), rargs, uses, driver == "text", tests,
                                 f" ORDER BY {order} LIMIT ?")
            out += [(k, pk) for pk, k in self.cur.execute(sql, [*args, need - len(out)])]
            if len(out) >= need:
                break
        return out

    def dense_offset(self, after: Cursor | None, offset: int) -> tuple[Cursor | None, int]:
        """Unfiltered store order with pk dense (no gaps): ``offset`` rows on is just ``offset`` pks on."""
        if self.preds or self.col != "pk" or not offset:
            return after, offset
        lo, hi, n = self.cur.execute("SELECT (SELECT MIN(pk) FROM rollout), (SELECT MAX(pk) FROM rollout), "
                                     "(SELECT COUNT(*) FROM rollout)").fetchone()
        if not n or hi - lo + 1 != n:
            return after, offset
        pk = (after[1] if after else hi + 1) - offset if self.desc else (after[1] if after else lo - 1) + offset
        return (pk, pk), 0

    # -- counting -------------------------------------------------------------------------------
    def count(self) -> int:
        if not self.preds:
            return self.cur.execute("SELECT COUNT(*) FROM rollout").fetchone()[0]
        if self.f.error_kind == "none":  # failed rows are few and indexed: count all, subtract those
            conn = self.cur.connection
            return (_Query(conn, dataclasses.replace(self.f, error_kind=None)).count()
                    - _Query(conn, dataclasses.replace(self.f, error_kind="any")).count())
        others = self.fewer_other_kinds()
        if others is not None:  # the runs of the other kinds hold fewer rollouts: count all, subtract theirs
            conn = self.cur.connection
            return (_Query(conn, dataclasses.replace(self.f, kinds=None)).count()
                    - _Query(conn, dataclasses.replace(self.f, kinds=others)).count())
        driver = self.best_gather("pk", [])[0]
        if driver == "text" and len(self.preds) == 1:
            return self.cur.execute("SELECT COUNT(*) FROM rollout_fts WHERE rollout_fts MATCH ?",
                                    (self.text,)).fetchone()[0]
        sql, args = self.sql("COUNT(*)", "1", (), self.group(driver), driver == "text",
                             [p for p in self.preds if p.kind != driver])
        return self.cur.execute(sql, args).fetchone()[0]


def _indexes(cur: sqlite3.Cursor) -> list[list[str]]:
    """The column lists of rollout's indexes (so indexes added after v1 are used when present)."""
    cols: dict[str, list[str]] = {}
    for name, col in cur.execute("SELECT m.name, i.name FROM sqlite_master m, pragma_index_info(m.name) i "
                                 "WHERE m.type = 'index' AND m.tbl_name = 'rollout' ORDER BY m.name, i.seqno"):
        cols.setdefault(name, []).append(col)
    return list(cols.values())


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
    q = _Query(conn, f or RolloutFilter())
    after, offset = q.dense_offset(after, offset)
    pks = [pk for _, pk in q.page(offset + limit, after)[offset:]]
    cur, rows = _cur(conn), {}
    for i in range(0, len(pks), 500):
        chunk = pks[i:i + 500]
        for r in cur.execute(f"SELECT {_LIGHT} FROM rollout WHERE pk IN ({','.join('?' * len(chunk))})", chunk):
            rows[r[0]] = RolloutSummary(*[*r[:13], r[13] or ""])
    return [rows[pk] for pk in pks if pk in rows]


def distinct_values(conn: sqlite3.Connection, column: str) -> list[str]:
    """The distinct values of an indexed rollout column (env, model, error_kind, run_id), sorted;
    one index seek per value (a skip scan), so it costs nothing on a large store."""
    col = {"env": "env_name", "run": "run_id"}.get(column, column)
    if col not in ("env_name", "model", "error_kind", "run_id"):
        raise ValueError(f"distinct_values supports env, model, error_kind and run_id, not {column!r}")
    sql = (f"WITH RECURSIVE v(x) AS (SELECT (SELECT {col} FROM rollout WHERE {col} IS NOT NULL ORDER BY {col} LIMIT 1) "
           f"UNION ALL SELECT (SELECT {col} FROM rollout WHERE {col} > v.x ORDER BY {col} LIMIT 1) FROM v "
           "WHERE v.x IS NOT NULL) SELECT x FROM v WHERE x IS NOT NULL")
    return [r[0] for r in _cur(conn).execute(sql)]
