"""Re-scoring stored rollouts after a reward edit: exact before/after numbers, errors counted per
function, group rewards over whole groups, each run's own env arguments, --apply beside the
originals, sandbox rewards skipped with their reason, and the CLI (output and bad input).

Rollouts come from real evals (``evaluate`` against the scripted mock server, one rollout at a
time so the replies land on known tasks) into a real store; the env file is then edited on disk.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    MockServer,
    assert_user_error,
    cli_environment,
    last_json,
    mock_args,
    query,
    run_workbench,
    write_file,
)
from workbench.analysis.rescore import RescoreResult, rescore
from workbench.authoring import discovery
from workbench.errors import ConfigError, NotFoundError
from workbench.runs.evaluate import EvalOptions, evaluate
from workbench.store import Store
from workbench.store.rescores import list_rescores, rescored_scores

VALUES_ENV = '''
import workbench as wb

VALUES = (0.0, 0.25, 0.5, 1.0)


def load_environment(scale: float = 1.0) -> wb.Environment:
    rows = [{"prompt": f"say value {v}", "answer": v} for v in VALUES]
    rubric = wb.Rubric()

    @rubric.reward(weight=1.0)
    def value(completion: str) -> float:
        return scale * float(completion.split()[-1])

    @rubric.metric
    def chars(completion: str) -> float:
        return float(len(completion))

    return wb.Environment(name="values", tasks=wb.TaskSet.from_records(rows, name="values"),
                          harness=wb.SingleTurn(), rubric=rubric, sampling=wb.Sampling(max_tokens=8, temperature=0.0))
'''
VALUE_LINE = "        return scale * float(completion.split()[-1])\n"

#: One reply per request; with one rollout at a time, task t sample s gets reply 2t + s. The
#: second rollout of task 1 fails (HTTP 400, not retried): 7 rollouts are scored, 1 is not.
SCRIPT: list[Any] = ["value 0.0", "value 0.0", "value 0.25", {"status": 400}, "value 0.5", "value 0.5",
                     "value 1.0", "value 1.0"]
STORED = [0.0, 0.0, 0.25, 0.5, 0.5, 1.0, 1.0]  # the scored rollouts' completions, in store order


@pytest.fixture(scope="module")
def script_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockServer]:
    server = MockServer(mock_args("script", script=SCRIPT), tmp_path_factory.mktemp("mock-logs") / "script.log")
    yield server
    server.stop()


@pytest.fixture
def env_file(tmp_path: Path) -> Path:
    return write_file(tmp_path / "envs" / "values.py", VALUES_ENV)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store" / "workbench.db"


def run_eval(env_file: Path, db: Path, server: MockServer, env_args: dict[str, Any] | None = None) -> str:
    opts = EvalOptions(env=str(env_file), env_args=env_args or {}, rollouts_per_task=2, concurrency=1,
                       model="mock-model", base_url=server.base_url, max_retries=0)
    with Store(db) as store:
        out = asyncio.run(evaluate(opts, store))
    assert out.summary["rollouts"] == 8 and out.summary["errors"] == 1
    return out.run_id


def edit(env_file: Path, old: str, new: str) -> None:
    text = env_file.read_text()
    assert text.count(old) == 1, old
    env_file.write_text(text.replace(old, new))


def do_rescore(env_file: Path, db: Path, *, per_run_args: bool = True, **kw: Any) -> RescoreResult:
    ref = discovery.resolve(str(env_file))
    env = discovery.load_ref(ref)
    factory = (lambda args: discovery.load_ref(ref, args)) if per_run_args else None
    with Store(db) as store:
        return asyncio.run(rescore(store, env, env_for_args=factory, **kw))


def mean(xs: list[float]) -> float:
    return math.fsum(xs) / len(xs)


def stderr(xs: list[float]) -> float:
    m = mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))


def test_edited_reward_rescored_without_the_model(env_file: Path, db: Path, script_server: MockServer) -> None:
    run_id = run_eval(env_file, db, script_server)
    stored = query(db, "SELECT id, reward FROM rollout ORDER BY pk")
    edit(env_file, VALUE_LINE, "        return scale * float(completion.split()[-1]) ** 2\n")
    res = do_rescore(env_file, db, keep_rollouts=True)

    after = [v * v for v in STORED]
    assert (res.env, res.runs, res.run_id) == ("values", [run_id], None)
    assert res.env_version == discovery.resolve(str(env_file)).version()
    assert (res.considered, res.rescored, res.failed) == (8, 7, 0)
    assert res.skipped == {"failed before scoring (no reward to re-compute)": 1}
    assert res.before.mean == pytest.approx(mean(STORED), abs=1e-12)
    assert res.before.stderr == pytest.approx(stderr(STORED), abs=1e-12)
    assert res.after.mean == pytest.approx(mean(after), abs=1e-12)
    assert res.after.stderr == pytest.approx(stderr(after), abs=1e-12)
    assert res.changed == 3  # 0.25 -> 0.0625 and 0.5 -> 0.25 (twice); 0 and 1 stay
    assert sum(res.histogram.before) == sum(res.histogram.after) == 7
    assert res.histogram.edges[0] == 0.0 and res.histogram.edges[-1] == 1.0
    assert res.histogram.before[0] == 2 and res.histogram.after[0] == 3  # [0, 0.1): 0, 0 | 0, 0, 0.0625
    by_name = {f.name: f for f in res.functions}
    assert [f.name for f in res.functions] == ["value", "chars"]
    assert by_name["value"].changed == 3 and by_name["chars"].changed == 0
    assert by_name["value"].after.mean == pytest.approx(mean(after), abs=1e-12)
    assert {r.id: (r.before, r.after) for r in res.rollouts} == {
        rid: (v, v * v) for (rid, _), v in zip([s for s in stored if s[1] is not None], STORED, strict=True)}
    assert res.top_changes[0].delta == pytest.approx(-0.25) and len(res.top_changes) == 3
    # Nothing written: the stored rewards are as they were, and no re-score record exists.
    assert query(db, "SELECT id, reward FROM rollout ORDER BY pk") == stored
    assert query(db, "SELECT COUNT(*) FROM rescore") == [(0,)]


def test_a_raising_reward_is_counted_per_function(env_file: Path, db: Path, script_server: MockServer) -> None:
    run_eval(env_file, db, script_server)
    edit(env_file, VALUE_LINE, '''        v = float(completion.split()[-1])
        if v > 0.6:
            raise ValueError(f"{v} is too big")
        return scale * v

    @rubric.reward(weight=2.0)
    async def answered(completion: str) -> float:  # async: the rollouts are scored concurrently
        return 1.0

    @rubric.group_reward(weight=1.0)
    def broken(completions: list[str]) -> list[float]:
        return [1.0]  # one value for the whole group: wrong, for groups of two
''')
    res = do_rescore(env_file, db)
    # The group reward fails on the three groups of two; task 1's group of one (its other rollout
    # failed) gets its one value. The two rollouts where ``value`` raises are in a failed group too.
    assert res.rescored == 7 and res.failed == 6
    assert res.errors == {"broken": 6, "value": 2}
    assert "ValueError: 1.0 is too big" in res.error_examples["value"]
    assert "group reward must return a list of 2 values" in res.error_examples["broken"]
    # A raised reward adds nothing to the total; the others still count.
    after = [2.0 + v + (1.0 if i == 2 else 0.0) if v <= 0.6 else 2.0 for i, v in enumerate(STORED)]
    assert res.after.mean == pytest.approx(mean(after), abs=1e-12)
    by_name = {f.name: f for f in res.functions}
    assert by_name["value"].errors == 2 and by_name["broken"].errors == 6
    assert by_name["answered"].kind == "reward" and by_name["broken"].kind == "group"
    assert by_name["broken"].after.n == 1


def test_group_rewards_see_whole_groups_and_limit_keeps_them_whole(env_file: Path, db: Path,
                                                                   script_server: MockServer) -> None:
    run_eval(env_file, db, script_server)
    edit(env_file, "    return wb.Environment(", '''    @rubric.group_reward(weight=0.5)
    def first(completions: list[str]) -> list[float]:
        return [1.0] + [0.0] * (len(completions) - 1)

    return wb.Environment(''')
    res = do_rescore(env_file, db)
    assert res.after.mean == pytest.approx(mean(STORED) + 0.5 * 4 / 7, abs=1e-12)  # one first rollout per task
    assert res.changed == 4
    limited = do_rescore(env_file, db, limit=3)
    assert (limited.considered, limited.rescored) == (4, 3)  # task 0 (2), then task 1 (1 ok + 1 failed), whole
    assert limited.changed == 2


def test_each_run_is_scored_with_its_own_env_arguments(env_file: Path, db: Path, script_server: MockServer) -> None:
    run_eval(env_file, db, script_server)
    run_eval(env_file, db, script_server, env_args={"scale": 2.0})
    own = do_rescore(env_file, db)
    assert own.rescored == 14 and own.changed == 0  # nothing edited: every run scores as it did
    default = do_rescore(env_file, db, per_run_args=False)
    assert default.changed == 5  # the scale-2 run's non-zero rewards (0.25, 0.5, 0.5, 1, 1) halve
    env_file.write_text(env_file.read_text().replace("scale", "factor"))  # the run's -a no longer fits
    renamed = do_rescore(env_file, db)
    assert renamed.rescored == 7 and renamed.changed == 0
    [(reason, n)] = renamed.skipped.items() - {("failed before scoring (no reward to re-compute)", 1)}
    assert n == 8 and "does not load with the run's arguments {\"scale\":2.0}" in reason


def test_apply_keeps_the_originals_and_records_the_env_version(env_file: Path, db: Path,
                                                              script_server: MockServer) -> None:
    run_id = run_eval(env_file, db, script_server)
    old_version = query(db, "SELECT env_version FROM run")[0][0]
    rollouts = query(db, "SELECT pk, reward FROM rollout ORDER BY pk")
    scores = query(db, "SELECT rollout_pk, name, kind, value FROM score ORDER BY id")
    edit(env_file, VALUE_LINE, "        return scale * float(completion.split()[-1]) + 1.0\n")
    res = do_rescore(env_file, db, run_id=run_id[:7], apply=True)
    assert res.run_id == run_id and res.record_id is not None
    assert query(db, "SELECT pk, reward FROM rollout ORDER BY pk") == rollouts
    assert query(db, "SELECT rollout_pk, name, kind, value FROM score ORDER BY id") == scores
    with Store(db) as store:
        records = list_rescores(store.conn, "values")
        assert len(records) == 1
        rec = records[0]
        assert (rec["id"], rec["status"], rec["rollouts"], rec["changed"], rec["run_id"]) == \
            (res.record_id, "completed", 7, 7, run_id)
        assert rec["env_version"] == res.env_version != old_version
        assert rec["summary"]["after"]["mean"] == pytest.approx(mean(STORED) + 1.0)
        for pk, reward in rollouts:
            new = rescored_scores(store.conn, pk)
            if reward is None:
                assert new is None  # failed before scoring: never re-scored
            else:
                assert new is not None and new["reward"] == pytest.approx(reward + 1.0)
                assert new["rewards"]["value"] == pytest.approx(reward + 1.0)
                assert new["metrics"]["chars"] == float(len(f"value {reward}"))
                assert new["record_id"] == res.record_id and new["errors"] == []


def test_an_interrupted_apply_is_marked_and_keeps_what_it_wrote(env_file: Path, db: Path,
                                                                 script_server: MockServer) -> None:
    run_eval(env_file, db, script_server)
    env = discovery.load(str(env_file))

    def stop_after_first_chunk(done: int, total: int) -> None:
        assert (done, total) == (2, 8)
        task = asyncio.current_task()
        assert task is not None
        task.cancel()  # what Ctrl-C (or a newer re-score in the app) does

    with Store(db) as store, pytest.raises(asyncio.CancelledError):
        asyncio.run(rescore(store, env, apply=True, chunk_size=2, progress=stop_after_first_chunk))
    assert query(db, "SELECT status, rollouts FROM rescore") == [("interrupted", 2)]
    assert query(db, "SELECT COUNT(*) FROM rescore_rollout") == [(2,)]  # task 0's group, committed
    with Store(db) as store:
        assert all(rescored_scores(store.conn, pk) is None for (pk,) in query(db, "SELECT pk FROM rollout"))


def test_rewards_that_need_a_sandbox_are_skipped_with_the_reason(env_file: Path, db: Path,
                                                                 script_server: MockServer) -> None:
    run_eval(env_file, db, script_server)
    edit(env_file, "    return wb.Environment(", '''    @rubric.metric
    async def listing(sandbox) -> float:
        return float(len((await sandbox.exec("ls")).stdout))

    return wb.Environment(''')
    res = do_rescore(env_file, db)
    assert res.rescored == 7 and res.kept == ["listing"] and res.changed == 0  # only a metric needs it: kept
    assert "listing" not in {f.name for f in res.functions}
    # (a size change too: an edit within the same second that keeps the size can hit a stale .pyc)
    edit(env_file, "    @rubric.metric\n    async def listing", "    @rubric.reward(weight=1.0)\n    async def listing")
    res = do_rescore(env_file, db)
    assert res.rescored == 0 and res.considered == 8
    [(reason, n)] = res.skipped.items()
    assert n == 8 and "reward 'listing' needs the rollout's live sandbox" in reason and "workbench eval" in reason


def test_trace_arguments_get_the_stored_calls_and_tokens(env_file: Path, db: Path, tmp_path: Path) -> None:
    server = MockServer(mock_args("script", "--tokens", script=SCRIPT), tmp_path / "tokens.log")
    try:
        run_eval(env_file, db, server)
    finally:
        server.stop()
    assert query(db, "SELECT COUNT(*) FROM trace") == [(7,)]
    edit(env_file, "    return wb.Environment(", '''    @rubric.metric
    def shape(trace) -> float:  # the rollout as rewards see it: its model calls and token trace
        sampled = sum(len(n.tokens) for n in trace.trace.nodes if n.kind == "assistant")
        return 100.0 * len(trace.calls) + 10.0 * trace.turns + sampled

    return wb.Environment(''')
    res = do_rescore(env_file, db, keep_rollouts=True)
    assert res.rescored == 7 and res.changed == 0 and res.failed == 0
    for r in res.rollouts:
        assert r.after_values["shape"] == 100.0 + 10.0 + 3.0  # one call, one turn, "value X" + end: 3 tokens
        assert r.before_values["token_mismatch"] == r.after_values["token_mismatch"] == 0.0  # kept as stored
    rows = {f.name: f for f in res.functions}
    assert rows["token_mismatch"].kind == "metric" and rows["token_mismatch"].changed == 0
    assert rows["shape"].changed == 7  # new: no stored value before


def test_bad_arguments_are_clear_errors(env_file: Path, db: Path, tmp_path: Path, script_server: MockServer) -> None:
    run_id = run_eval(env_file, db, script_server)
    other = write_file(tmp_path / "envs" / "other.py", VALUES_ENV.replace('name="values"', 'name="other"'))
    with pytest.raises(ConfigError, match=f"run {run_id} is a run of 'values', not 'other'"):
        do_rescore(other, db, run_id=run_id)
    with pytest.raises(NotFoundError, match="environment 'other' has no stored rollouts"):
        do_rescore(other, db)
    with pytest.raises(NotFoundError, match="no run 'nope'"):
        do_rescore(env_file, db, run_id="nope")
    with pytest.raises(ConfigError, match="limit must be at least 1, not 0"):
        do_rescore(env_file, db, limit=0)
    assert query(db, "SELECT COUNT(*) FROM rescore") == [(0,)]


# -- the command line ---------------------------------------------------------------------------------
@pytest.fixture
def cli(tmp_path: Path, db: Path) -> Callable[..., Any]:
    env = cli_environment(tmp_path, db)
    return lambda *args: run_workbench(["rescore", *args], env, cwd=tmp_path)


def test_cli_prints_before_and_after(env_file: Path, db: Path, script_server: MockServer, cli: Any) -> None:
    run_eval(env_file, db, script_server)
    edit(env_file, VALUE_LINE, "        return scale * float(completion.split()[-1]) / 2\n")
    res = cli(env_file)
    assert res.rc == 0, res.stderr
    out = res.stdout
    assert "7 of 8 stored rollouts re-scored" in out
    assert f"{mean(STORED):.3f} ± {stderr(STORED):.3f}" in out
    assert f"{mean(STORED) / 2:.3f} ± {stderr(STORED) / 2:.3f}" in out
    assert "changed: 5 of 7 rollouts" in out
    assert "skipped 1 rollout: failed before scoring" in out
    assert "[0.00, 0.10)" in out and "[0.90, 1.00]" in out and "█" in out
    assert "not applied" in out
    data = last_json(cli(env_file, "--json", "--apply").stdout)
    assert data["applied"] is True and data["changed"] == 5 and data["rescored"] == 7
    assert data["before"]["mean"] == pytest.approx(mean(STORED)) and data["after"]["n"] == 7
    assert [f["name"] for f in data["functions"]] == ["value", "chars"]
    assert query(db, "SELECT status, rollouts FROM rescore") == [("completed", 7)]


def test_cli_bad_input(env_file: Path, db: Path, tmp_path: Path, script_server: MockServer, cli: Any) -> None:
    assert_user_error(cli("no_such_env"), "unknown environment 'no_such_env'")
    assert_user_error(cli(env_file), "has no stored rollouts")
    run_eval(env_file, db, script_server)
    assert_user_error(cli(env_file, "--run", "0000-ffffff"), "no run '0000-ffffff'", "workbench runs")
    assert_user_error(cli(env_file, "--limit", "0"), "--limit must be at least 1")
    assert_user_error(cli(env_file, "-a", "[1]"), "-a/--env-args must be a JSON object")
    assert_user_error(cli(env_file, "-a", '{"nope": 1}'), "does not accept these -a/--env-args arguments")
    assert query(db, "SELECT COUNT(*) FROM rescore") == [(0,)]
