"""The trace browser's queries, checked exactly against brute force over a generated store."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import re
import sqlite3
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from workbench.errors import NotFoundError
from workbench.records.rollout import searchable_text
from workbench.store import Store, queries
from workbench.store.db import connect
from workbench.store.queries import (
    RolloutFilter,
    count_rollouts,
    distinct_values,
    fts_query,
    get_rollout,
    list_runs,
    page_rollouts,
)

ROOT = Path(__file__).resolve().parents[2]
N = 2000


def _load_gen() -> Any:
    spec = importlib.util.spec_from_file_location("gen_store", ROOT / "scripts" / "gen_store.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gen_store"] = mod
    spec.loader.exec_module(mod)
    return mod


gen_store = _load_gen()


def _words(text: str) -> set[str]:
    return set(re.findall(r"[^\W_]+", text.lower()))


@pytest.fixture(scope="module")
def gen_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("store") / "wb.db"
    gen_store.generate(path, N, seed=3, workers=0)
    return path


@pytest.fixture(scope="module")
def rows(gen_path: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(gen_path)
    conn.row_factory = sqlite3.Row
    out = []
    for r in conn.execute("SELECT * FROM rollout ORDER BY pk"):
        d = dict(r)
        d["words"] = _words(searchable_text(orjson.loads(d["messages"])))
        out.append(d)
    conn.close()
    return out


@pytest.fixture(params=[None, sqlite3.Row])
def conn(gen_path: Path, request: pytest.FixtureRequest) -> Any:
    c = connect(gen_path, readonly=True)
    c.row_factory = request.param
    yield c
    c.close()


@pytest.fixture(params=["default", "tiny"])
def budgets(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """'tiny' forces the walk -> gather fallbacks and the per-row FTS test on a small store."""
    if request.param == "tiny":
        monkeypatch.setattr(queries, "_WALK", 8)
        monkeypatch.setattr(queries, "_PROBE_CAP", 40)
        monkeypatch.setattr(queries, "_TEXT_CAP", 60)


def _match(r: dict[str, Any], f: RolloutFilter) -> bool:
    if f.env is not None and r["env_name"] != f.env:
        return False
    if f.run_id is not None and r["run_id"] != f.run_id:
        return False
    if f.model is not None and r["model"] != f.model:
        return False
    if f.status is not None and r["status"] != f.status:
        return False
    if f.min_reward is not None and (r["reward"] is None or r["reward"] < f.min_reward):
        return False
    if f.max_reward is not None and (r["reward"] is None or r["reward"] > f.max_reward):
        return False
    ek = f.error_kind
    if ek == "any" and r["error_kind"] is None or ek == "none" and r["error_kind"] is not None:
        return False
    if ek not in (None, "any", "none") and r["error_kind"] != ek:
        return False
    if f.text:
        for term in f.text.split():
            if term.endswith("*"):
                if not any(w.startswith(term[:-1].lower()) for w in r["words"]):
                    return False
            elif not _words(term) <= r["words"]:
                return False
    return True


def _order(rs: list[dict[str, Any]], sort: str) -> list[int]:
    col = {"created": "pk", "reward": "reward", "duration": "duration_s"}[sort.lstrip("-")]

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        v = r[col]
        return (v is not None, v if v is not None else 0, r["pk"])

    pks = [r["pk"] for r in sorted(rs, key=key)]
    return pks[::-1] if sort.startswith("-") else pks


def _expected(rows: list[dict[str, Any]], f: RolloutFilter) -> list[int]:
    return _order([r for r in rows if _match(r, f)], f.sort)


def _filters(rows: list[dict[str, Any]]) -> list[RolloutFilter]:
    runs = sorted({r["run_id"] for r in rows})
    big_run = max(runs, key=lambda x: sum(r["run_id"] == x for r in rows))
    return [
        RolloutFilter(),
        RolloutFilter(env="wordle"),
        RolloutFilter(env="doc_search", status="ok"),
        RolloutFilter(run_id=big_run),
        RolloutFilter(run_id=runs[0], min_reward=0.5),
        RolloutFilter(model="workbench-tiny"),
        RolloutFilter(model="gpt-4o-mini", env="arithmetic", max_reward=0.9),
        RolloutFilter(min_reward=0.4, max_reward=1.0),
        RolloutFilter(min_reward=1.1),
        RolloutFilter(error_kind="timeout"),
        RolloutFilter(error_kind="any"),
        RolloutFilter(error_kind="none", env="arithmetic"),
        RolloutFilter(error_kind="any", env="wordle"),
        RolloutFilter(status="error"),
        RolloutFilter(text="answer"),
        RolloutFilter(text="document the"),
        RolloutFilter(text="answer", env="wordle", min_reward=0.3),
        RolloutFilter(text="search", error_kind="none"),
        RolloutFilter(text="su*"),
        RolloutFilter(text="zzzznotthere"),
        RolloutFilter(env="no-such-env"),
    ]


SORTS = ["created", "-created", "reward", "-reward", "duration", "-duration"]


@pytest.mark.parametrize("sort", SORTS)
def test_keyset_pages_cover_every_row_once_in_order(conn: Any, rows: list[dict[str, Any]], sort: str,
                                                    budgets: None) -> None:
    for base in _filters(rows):
        f = dataclasses.replace(base, sort=sort)
        want = _expected(rows, f)
        got: list[int] = []
        after = None
        while True:
            page = page_rollouts(conn, f, limit=97, after=after)
            got += [r.pk for r in page]
            if len(page) < 97:
                break
            after = page[-1].cursor(sort)
        assert got == want, f
        assert count_rollouts(conn, f) == len(want), f
        first = page_rollouts(conn, f, limit=25, offset=40)
        assert [r.pk for r in first] == want[40:65], f


def test_summary_rows_are_light_and_exact(conn: Any, rows: list[dict[str, Any]]) -> None:
    by_pk = {r["pk"]: r for r in rows}
    page = page_rollouts(conn, RolloutFilter(env="doc_search", sort="-reward"), limit=50)
    assert len(page) == 50
    for s in page:
        r = by_pk[s.pk]
        assert (s.id, s.run_id, s.env_name, s.model, s.task_index, s.sample_index, s.status, s.error_kind,
                s.reward, s.turns, s.duration_s, s.created_at) == (
            r["id"], r["run_id"], r["env_name"], r["model"], r["task_index"], r["sample_index"], r["status"],
            r["error_kind"], r["reward"], r["turns"], r["duration_s"], r["created_at"])
        assert s.preview == r["completion"][:120]
    assert page_rollouts(conn, RolloutFilter(), limit=0) == []
    with pytest.raises(ValueError):
        page_rollouts(conn, RolloutFilter(sort="loudness"))


@pytest.mark.parametrize("word", ["answer", "the", "document", "xylophone", "gojozuze", "search"])
def test_fts_finds_exactly_the_rollouts_with_the_word(conn: Any, rows: list[dict[str, Any]], word: str) -> None:
    want = {r["pk"] for r in rows if word in r["words"]}
    f = RolloutFilter(text=word.upper())  # case does not matter
    got = {r.pk for r in page_rollouts(conn, f, limit=N)}
    assert got == want
    assert count_rollouts(conn, f) == len(want)


@pytest.mark.parametrize("text", ['foo"bar OR(', '"', '""', "(", ")", "*", "AND", "OR", "NOT", "NEAR(a b)",
                                  "a:b", "^start", "-x", "{col}", "'", "\\", "\x00", "'; DROP TABLE rollout; --",
                                  "answer*", '"unterminated phrase', "α β", "💥", "   ", "", "a" * 500])
def test_hostile_search_text_never_raises(conn: Any, text: str) -> None:
    f = RolloutFilter(text=text, sort="-reward")
    page_rollouts(conn, f, limit=5)
    count_rollouts(conn, f)


def test_fts_query_quotes_terms() -> None:
    assert fts_query('foo"bar OR(') == '"foo""bar" "OR("'
    assert fts_query('"exact phrase" pre*') == '"exact phrase" "pre"*'
    assert fts_query("( ) *") is None
    assert fts_query("") is None


def test_get_rollout_by_id_pk_and_prefix(conn: Any, rows: list[dict[str, Any]], gen_path: Path) -> None:
    r = next(x for x in rows if x["env_name"] == "doc_search" and x["status"] == "ok")
    d = get_rollout(conn, r["id"])
    assert d["pk"] == r["pk"] and d["messages"] == orjson.loads(r["messages"])
    assert d["prompt"] == orjson.loads(r["prompt"]) and d["info"] == orjson.loads(r["info"])
    assert d["answer"] == orjson.loads(r["answer"]) and d["state"] == orjson.loads(r["state"])
    raw = sqlite3.connect(gen_path)
    scores = raw.execute("SELECT name, kind, value FROM score WHERE rollout_pk=?", (r["pk"],)).fetchall()
    assert d["rewards"] == {n: v for n, k, v in scores if k == "reward"}
    assert d["metrics"] == {n: v for n, k, v in scores if k == "metric"}
    n_calls = raw.execute("SELECT COUNT(*) FROM model_call WHERE rollout_pk=?", (r["pk"],)).fetchone()[0]
    assert len(d["calls"]) == n_calls == d["turns"] and [c["index"] for c in d["calls"]] == list(range(n_calls))
    raw.close()
    assert get_rollout(conn, r["pk"])["id"] == r["id"]
    assert get_rollout(conn, str(r["pk"]))["id"] == r["id"]
    # a unique prefix works; an ambiguous one and a missing id say what is wrong
    ids = sorted(x["id"] for x in rows)
    unique = next(i[:-1] for i in ids if sum(j.startswith(i[:-1]) for j in ids) == 1)
    assert get_rollout(conn, unique)["id"].startswith(unique)
    with pytest.raises(NotFoundError, match="several rollouts"):
        get_rollout(conn, r["run_id"])
    with pytest.raises(NotFoundError, match="no rollout 'nope.1.2'"):
        get_rollout(conn, "nope.1.2")
    with pytest.raises(NotFoundError):
        get_rollout(conn, 10**9)
    failed = next(x for x in rows if x["status"] == "error")
    e = get_rollout(conn, failed["id"])
    assert e["reward"] is None and e["errors"] and e["errors"][0]["kind"] == failed["error_kind"]


def test_list_runs_counts(conn: Any, rows: list[dict[str, Any]]) -> None:
    runs = list_runs(conn, limit=100)
    assert [r["created_at"] for r in runs] == sorted((r["created_at"] for r in runs), reverse=True)
    assert {r["status"] for r in runs} >= {"completed", "running", "interrupted"}
    assert len(runs) == len({r["run_id"] for r in rows})
    for run in runs:
        mine = [r for r in rows if r["run_id"] == run["id"]]
        rewards = [r["reward"] for r in mine if r["reward"] is not None]
        assert run["rollouts"] == len(mine)
        assert run["errors"] == sum(r["status"] == "error" for r in mine)
        assert math.isclose(run["mean_reward"], sum(rewards) / len(rewards), rel_tol=1e-9)
    wordle = list_runs(conn, limit=2, env="wordle")
    assert len(wordle) == 2 and all(r["env_name"] == "wordle" for r in wordle)


def test_distinct_values(conn: Any, rows: list[dict[str, Any]]) -> None:
    for column, key in (("env", "env_name"), ("model", "model"), ("error_kind", "error_kind"), ("run_id", "run_id")):
        assert distinct_values(conn, column) == sorted({r[key] for r in rows if r[key] is not None})
    with pytest.raises(ValueError):
        distinct_values(conn, "completion")


def test_walks_use_indexes_in_order(conn: Any) -> None:
    """The common pages never sort: each reads an index that yields the order."""
    cases = [RolloutFilter(), RolloutFilter(sort="-created"), RolloutFilter(model="gpt-4o-mini"),
             RolloutFilter(error_kind="timeout"), RolloutFilter(sort="-reward"), RolloutFilter(text="answer"),
             RolloutFilter(run_id=distinct_values(conn, "run_id")[0], sort="reward")]
    for f in cases:
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        try:
            page_rollouts(conn, f, limit=20)
        finally:
            conn.set_trace_callback(None)
        walks = [sql for sql in seen if sql.startswith("SELECT r.pk")]
        assert walks, f
        for sql in walks:  # the trace shows each statement with its values bound
            plan = " | ".join(str(r[-1]) for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
            assert "TEMP B-TREE" not in plan, (f, sql, plan)


def test_browser_indexes_are_used_and_pages_stay_exact(gen_path: Path, rows: list[dict[str, Any]]) -> None:
    """Migration v3 adds indexes for duration order and env in pk order; pages walk them exactly."""
    c = connect(gen_path)
    c.execute("BEGIN IMMEDIATE")
    try:
        names = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert {"ix_rollout_duration", "ix_rollout_env"} <= names
        for base in _filters(rows):
            for sort in SORTS:
                f = dataclasses.replace(base, sort=sort)
                got, after = [], None
                while page := page_rollouts(c, f, limit=150, after=after):
                    got += [r.pk for r in page]
                    after = page[-1].cursor(sort)
                assert got == _expected(rows, f), f
        for f in (RolloutFilter(sort="-duration"), RolloutFilter(env="wordle")):
            seen: list[str] = []
            c.set_trace_callback(seen.append)
            page_rollouts(c, f, limit=20)
            c.set_trace_callback(None)
            plans = [" | ".join(str(r[-1]) for r in c.execute(f"EXPLAIN QUERY PLAN {sql}"))
                     for sql in seen if sql.startswith("SELECT r.pk")]
            assert plans and all("TEMP B-TREE" not in p for p in plans), (f, plans)
    finally:
        c.execute("ROLLBACK")
        c.close()


def test_offset_with_and_without_gaps_in_pk(tmp_path: Path) -> None:
    path = tmp_path / "gaps.db"
    gen_store.generate(path, 300, seed=9, workers=0)
    c = connect(path)
    for gap in (False, True):
        if gap:
            c.execute("DELETE FROM rollout WHERE pk IN (5, 6, 150)")
        pks = [r[0] for r in c.execute("SELECT pk FROM rollout ORDER BY pk")]
        for sort, order in (("created", pks), ("-created", pks[::-1])):
            f = RolloutFilter(sort=sort)
            for offset in (0, 1, 3, 7, 140, 296, 299, 400):
                assert [r.pk for r in page_rollouts(c, f, limit=10, offset=offset)] == order[offset:offset + 10]
            first = page_rollouts(c, f, limit=4)
            assert [r.pk for r in page_rollouts(c, f, limit=5, offset=6, after=first[-1].cursor(sort))] == \
                order[10:15]
    c.close()


def test_batch_writer_loses_nothing(tmp_path: Path) -> None:
    """Groups written through BatchWriter are all there after close, with their side tables."""
    path = tmp_path / "w.db"
    runs = gen_store.plan_runs(300, seed=5)
    store = Store(path)
    for run in runs:
        store.create_run(run.id, env_name=run.env, model=run.model)
    writer = store.writer(max_batch=64)
    gen = gen_store.Generator(5)
    expect = {"rollout": 0, "score": 0, "model_call": 0, "rollout_error": 0}
    for i, a, b in gen_store.work_units(runs):
        batch = gen.chunk(runs[i], a, b)
        for s in batch:
            expect["rollout"] += 1
            expect["score"] += len(s.rewards) + len(s.metrics)
            expect["model_call"] += len(s.calls)
            expect["rollout_error"] += len(s.errors)
        for k in range(0, len(batch), 8):
            writer.submit([gen_store.record(s) for s in batch[k:k + 8]])
    writer.flush()
    writer.close()
    assert writer.committed == expect["rollout"] == 300
    store.close()
    c = connect(path, readonly=True)
    for table, n in expect.items():
        assert c.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == n, table
    assert count_rollouts(c, RolloutFilter()) == 300
    assert len(page_rollouts(c, RolloutFilter(), limit=1000)) == 300
    assert sum(r["rollouts"] for r in list_runs(c)) == 300
    c.close()
