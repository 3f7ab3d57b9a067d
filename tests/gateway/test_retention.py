"""The retention limit of recorded traffic: ``gateway --retain-days/--retain-exchanges`` while serving and
``gateway prune`` once. What goes, goes whole (its scores, full-text entry, feedback; a session's feedback when
none of its exchanges is left; the finished runs left empty) and what stays is untouched. A real gateway, real
SQLite."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.support import Running, post
from tests.helpers import assert_user_error, count_rollouts, last_json, wait_for


def _fts(store: Path, word: str) -> list[int]:
    conn = sqlite3.connect(store)
    try:
        return [r[0] for r in conn.execute("SELECT rowid FROM rollout_fts WHERE rollout_fts MATCH ?", (word,))]
    finally:
        conn.close()


def _query(store: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(store)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def _record(registered: str, gw: Running, n: int, session: str) -> list[str]:
    """``n`` calls in ``session``, each asking about a word of its own (``wordS0``, ``wordS1``, ...)."""
    import openai

    oa = openai.OpenAI(base_url=gw.base_url, api_key=registered, max_retries=0,
                       default_headers={"X-Workbench-Session": session})
    return [oa.chat.completions.with_raw_response.create(
        model="support", messages=[{"role": "user", "content": f"about word{session}{i}"}]
    ).headers["X-Workbench-Response-Id"] for i in range(n)]


def test_prune_deletes_the_oldest_exchanges_whole_and_leaves_the_rest(
        registered: str, gateway: Callable[..., Running], cli: Callable[..., Any], env: dict[str, str],
        store_path: Path) -> None:
    gw = gateway("--route", "support=good")
    old = _record(registered, gw, 4, "a")  # session a: the oldest four
    new = _record(registered, gw, 3, "b")
    feedback = f"{gw.root}/v1/feedback"
    for rid in (old[0], new[-1]):
        assert post(feedback, registered, {"response_id": rid, "score": 1.0})[0] == 200
    for session in ("a", "b"):
        assert post(feedback, registered, {"session": session, "label": "resolved"})[0] == 200
    wait_for(lambda: count_rollouts(store_path) == 7, 60, "every exchange recorded")
    gw.stop()
    assert _fts(store_path, "worda0") and _fts(store_path, "wordb2")

    res = cli("gateway", "prune", "--retain-exchanges", "3", "--json", env=env)
    assert res.rc == 0, res.stderr
    gone = last_json(res.stdout)
    assert gone["exchanges"] == 4 and gone["feedback"] == 2  # old[0]'s own and session a's (none of it is left)
    assert gone["runs"] == 0  # the run still holds session b
    left = {r[0] for r in _query(store_path, "SELECT id FROM rollout")}
    assert left == set(new)
    assert not _fts(store_path, "worda0") and not _fts(store_path, "worda3") and _fts(store_path, "wordb2")
    assert _query(store_path, "SELECT COUNT(*) FROM score WHERE rollout_pk NOT IN (SELECT pk FROM rollout)") == [(0,)]
    kept = _query(store_path, "SELECT response_id, session FROM feedback ORDER BY id")
    assert kept == [(new[-1], None), (None, "b")]
    shown = cli("show", new[-1], "--json", env=env)
    assert shown.rc == 0 and len(last_json(shown.stdout)["feedback"]) == 2

    everything = last_json(cli("gateway", "prune", "--retain-exchanges", "0", "--json", env=env).stdout)
    assert (everything["exchanges"], everything["feedback"], everything["runs"]) == (3, 2, 1)
    assert _query(store_path, "SELECT COUNT(*) FROM run WHERE kind = 'gateway'") == [(0,)]
    assert _query(store_path, "SELECT COUNT(*) FROM feedback") == [(0,)]


def test_the_age_limit_deletes_what_is_older_and_a_serving_gateway_applies_its_limit(
        registered: str, gateway: Callable[..., Running], cli: Callable[..., Any], env: dict[str, str],
        store_path: Path) -> None:
    gw = gateway("--route", "support=good")
    first = _record(registered, gw, 5, "a")
    wait_for(lambda: count_rollouts(store_path) == 5, 60, "every exchange recorded")
    gw.stop()
    conn = sqlite3.connect(store_path)
    with conn:  # two exchanges made three days ago
        conn.executemany("UPDATE rollout SET created_at = ? WHERE id = ?",
                         [(time.time() - 3 * 86_400, rid) for rid in first[:2]])
    conn.close()
    aged = last_json(cli("gateway", "prune", "--retain-days", "2", "--json", env=env).stdout)
    assert aged["exchanges"] == 2 and {r[0] for r in _query(store_path, "SELECT id FROM rollout")} == set(first[2:])

    serving = gateway("--route", "support=good", "--retain-exchanges", "1")
    assert serving.info["retention"] == "the newest 1 exchanges"
    wait_for(lambda: count_rollouts(store_path) == 1, 60, "the serving gateway's limit applied when it starts")
    assert {r[0] for r in _query(store_path, "SELECT id FROM rollout")} == {first[-1]}
    assert _record(registered, serving, 1, "c")  # and it serves on


#: (arguments after ``workbench``, what the one line says)
BAD_RETENTION = [
    (("gateway", "prune"), "gateway prune needs a limit"),
    (("gateway", "prune", "--retain-days", "0"), "--retain-days 0: a number of days above 0"),
    (("gateway", "prune", "--retain-exchanges", "-1"), "--retain-exchanges -1"),
    (("gateway", "--route", "support=good", "--retain-days", "-3"), "--retain-days -3"),
]


@pytest.mark.parametrize(("args", "fragment"), BAD_RETENTION, ids=[" ".join(a) for a, _ in BAD_RETENTION])
def test_a_bad_retention_limit_is_one_line_and_deletes_nothing(
        registered: str, cli: Callable[..., Any], env: dict[str, str], store_path: Path, args: tuple[str, ...],
        fragment: str) -> None:
    from workbench.store import Store

    Store(store_path).close()
    assert_user_error(cli(*args, env=env), fragment)
