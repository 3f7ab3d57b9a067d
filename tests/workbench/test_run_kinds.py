"""Runs have a kind, and the user's own work comes first: after `validate`, `probe` and an eval, the listing,
rescore, the rollout search and the MCP tools show the eval unless other kinds are asked for; a probe's policies
are one entry that opens; every kind a run is created with is one of RUN_KINDS."""

from __future__ import annotations

import ast
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO, MockServer, cli_environment, last_json, run_workbench
from workbench.runs.kinds import PIPELINE_KINDS, RUN_KINDS, USER_KINDS, parse_kinds
from workbench.store import RUN_DEFAULTS, Store
from workbench.store.migrations import MIGRATIONS, SCHEMA_VERSION
from workbench.store.queries import RolloutFilter, count_rollouts, list_runs, page_rollouts


class Session:
    """One store after `validate arithmetic`, `probe arithmetic` and `eval arithmetic -n 4 -r 1`."""

    def __init__(self, home: Path, db: Path, env: dict[str, str], eval_id: str) -> None:
        self.home, self.db, self.env, self.eval_id = home, db, env, eval_id

    def cli(self, *args: Any, **extra_env: str) -> Any:
        return run_workbench([*args, "--db", self.db], {**self.env, **extra_env}, cwd=self.home)

    def json(self, *args: Any) -> Any:
        res = self.cli(*args, "--json")
        assert res.rc == 0, res.stderr
        return last_json(res.stdout)

    def kinds(self) -> dict[str, str]:
        con = sqlite3.connect(self.db)
        try:
            return dict(con.execute("SELECT id, kind FROM run"))
        finally:
            con.close()


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory, arith_server: MockServer) -> Session:
    home = tmp_path_factory.mktemp("kinds")
    db = home / "store.db"
    env = cli_environment(home, db)
    for args in (["validate", "arithmetic", "--db", db], ["probe", "arithmetic", "-n", "3", "--db", db]):
        res = run_workbench(args, env, cwd=home)
        assert res.rc in (0, 1), res.stderr  # probe exits 1 on an exploitable policy; that is still a probe
    res = run_workbench(["eval", "arithmetic", "--base-url", arith_server.base_url, "-m", "mock-model", "-n", 4,
                         "-r", 1, "--db", db, "--json"], env, cwd=home)
    assert res.rc == 0, res.stderr
    return Session(home, db, env, last_json(res.stdout)["run_id"])


def test_validate_and_probe_runs_are_recorded_as_their_kinds(session: Session) -> None:
    res = session.cli("probe", "arithmetic", "-n", "1", "--json")
    assert res.rc in (0, 1), res.stderr  # 1: a policy is exploitable
    probe = last_json(res.stdout)
    assert probe["kind"] == "probe" and session.json("runs", "--kind", "probe")["runs"][0]["id"] == probe["probe_id"]
    counts: dict[str, int] = {}
    for kind in session.kinds().values():
        counts[kind] = counts.get(kind, 0) + 1
    assert counts["eval"] == 1 and counts["validate"] >= 5 and counts["probe"] >= 5, counts


@pytest.mark.parametrize(("flags", "kinds"), [
    ((), {"eval"}),
    (("--kind", "validate"), {"validate"}),
    (("--kind", "probe,validate"), {"probe", "validate"}),
    (("--kind", "probe", "--kind", "eval"), {"probe", "eval"}),
    (("--kind", "all"), {"eval", "probe", "validate"}),
])
def test_runs_lists_the_kinds_asked_for(session: Session, flags: tuple[str, ...], kinds: set[str]) -> None:
    out = session.json("runs", *flags)
    assert {r["kind"] for r in out["runs"]} == kinds
    assert (session.eval_id in {r["id"] for r in out["runs"]}) == ("eval" in kinds)
    for entry in out["runs"]:
        if entry["kind"] in PIPELINE_KINDS:  # a probe is one entry: its pipeline id, its policies' runs
            assert entry["id"].startswith("prb-") and entry["model"] == "probe:*" and len(entry["members"]) >= 5
            assert entry["rollouts"] == sum(m["rollouts"] for m in session.json("runs", entry["id"])["pipeline"]["runs"])
    assert sum(1 for r in out["runs"] if r["kind"] == "validate") <= 1


@pytest.mark.parametrize(("flags", "kinds"), [((), {"eval"}), (("--kind", "validate"), {"validate"})])
def test_show_without_a_target_lists_the_runs(session: Session, flags: tuple[str, ...], kinds: set[str]) -> None:
    assert {r["kind"] for r in session.json("show", *flags)["runs"]} == kinds


def test_no_run_of_the_kinds_asked_for_says_how_to_see_the_others(tmp_path: Path) -> None:
    db = tmp_path / "only-probes.db"
    store = Store(db)
    try:
        store.create_run("1205-aprobe", kind="probe", env_name="arithmetic", created_at=1.0)
    finally:
        store.close()
    res = run_workbench(["runs", "--db", db], cli_environment(tmp_path, db))
    assert res.rc == 0 and "--kind all" in res.stdout and "1205-aprobe" not in res.stdout, res.stdout


def test_a_probe_entry_opens_with_its_policies(session: Session) -> None:
    entry = next(r for r in session.json("runs", "--kind", "validate")["runs"])
    for command in ("runs", "show"):
        res = session.cli(command, entry["id"])
        assert res.rc == 0, res.stderr
        for member in entry["members"]:
            assert member in res.stdout
        assert "gold" in res.stdout and "empty" in res.stdout
    opened = session.json("show", entry["id"])["pipeline"]
    assert [m["id"] for m in opened["runs"]] == entry["members"]
    assert {m["policy"] for m in opened["runs"]} >= {"gold", "empty"}
    gold = next(m for m in opened["runs"] if m["policy"] == "gold")
    assert gold["mean_reward"] is not None and gold["mean_reward"] > 0


@pytest.mark.parametrize("args", [("runs", "--kind", "bogus"), ("show", "--kind", "eval,nope"),
                                  ("rescore", "arithmetic", "--kind", "bogus")])
def test_an_unknown_kind_is_one_line_naming_the_flag(session: Session, args: tuple[str, ...]) -> None:
    res = session.cli(*args)
    assert res.rc != 0 and "Traceback" not in res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--kind" in lines[0] and "validate" in lines[0] and "all" in lines[0], res.stderr


@pytest.mark.parametrize(("flags", "rollouts"), [((), 4), (("--kind", "eval"), 4)])
def test_rescore_leaves_probe_rollouts_out(session: Session, flags: tuple[str, ...], rollouts: int) -> None:
    out = session.json("rescore", "arithmetic", *flags)
    assert out["considered"] == rollouts and out["runs"] == [session.eval_id], out
    everything = session.json("rescore", "arithmetic", "--kind", "all")
    assert everything["considered"] > rollouts and session.eval_id in everything["runs"]


def test_the_rollout_search_keeps_to_the_kinds_asked_for(session: Session) -> None:
    con = sqlite3.connect(session.db)
    try:
        total = con.execute("SELECT COUNT(*) FROM rollout").fetchone()[0]
        ours = count_rollouts(con, RolloutFilter())
        assert ours == 4 and [r.run_id for r in page_rollouts(con, RolloutFilter(), limit=10)] == [session.eval_id] * 4
        assert count_rollouts(con, RolloutFilter(kinds=None)) == total
        probe = count_rollouts(con, RolloutFilter(kinds=("probe", "validate")))
        assert probe == total - 4 and len(page_rollouts(con, RolloutFilter(kinds=("probe",), sort="-reward"),
                                                        limit=500)) == count_rollouts(con, RolloutFilter(kinds=("probe",)))
        a_probe_run = next(i for i, k in session.kinds().items() if k == "probe")
        assert count_rollouts(con, RolloutFilter(run_id=a_probe_run)) > 0  # one run asked for: whatever its kind
        assert count_rollouts(con, RolloutFilter(text="the", kinds=("eval",))) <= 4
    finally:
        con.close()


def test_show_run_lists_its_rollouts(session: Session) -> None:
    out = session.json("show", session.eval_id)
    ids = [r["id"] for r in out["rollouts"]]
    assert len(ids) == 4 and all(i.startswith(session.eval_id + ".") for i in ids)
    assert {"task", "sample", "reward", "status", "completion"} <= set(out["rollouts"][0])
    assert out["page"]["total"] == 4
    text = session.cli("show", session.eval_id)
    assert text.rc == 0 and all(i in text.stdout for i in ids), text.stdout


def test_narrow_terminal_output_keeps_ids_whole(session: Session) -> None:
    """In an 80-column terminal (a table, not tab-separated lines) the run and rollout ids are whole."""
    runs = session.cli("runs", "--kind", "all", COLUMNS="80", TTY_COMPATIBLE="1")
    assert runs.rc == 0 and "\t" not in runs.stdout, runs.stdout
    assert session.eval_id in runs.stdout and any("kind" in ln for ln in runs.stdout.splitlines()[:2])
    for entry in session.json("runs", "--kind", "all")["runs"]:
        assert entry["id"] in runs.stdout
    assert all(len(ln) <= 80 for ln in runs.stdout.splitlines()), runs.stdout
    show = session.cli("show", session.eval_id, COLUMNS="80", TTY_COMPATIBLE="1")
    assert show.rc == 0, show.stderr
    listed = session.json("show", session.eval_id)["rollouts"]
    table = [ln for ln in show.stdout.splitlines() if any(ln.startswith(r["id"] + " ") for r in listed)]
    assert len(table) == len(listed) == 4 and all(len(ln) <= 80 for ln in table), show.stdout
    header = next(ln for ln in show.stdout.splitlines() if ln.startswith("rollout "))
    assert header.split() == ["rollout", "task", "sample", "reward", "status", "completion"], header


def test_create_run_refuses_a_kind_that_is_not_a_run_kind(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    try:
        with pytest.raises(ValueError, match="run kind 'probes' is not one of eval, train"):
            store.create_run("r", kind="probes", env_name="e")
        for kind in RUN_KINDS:
            store.create_run(f"r-{kind}", kind=kind, env_name="e")
        assert {r["kind"] for r in list_runs(store.conn, kinds=None)} == set(RUN_KINDS)
        assert {r["kind"] for r in list_runs(store.conn)} == set(USER_KINDS)
    finally:
        store.close()


def _create_run_kinds() -> list[tuple[str, int, str]]:
    """(file, line, kind) of every ``create_run(..., kind=...)`` in the shipped packages; a kind that is not a
    literal is resolved from the module's constant of that name."""
    found = []
    for pkg in ("workbench", "local_runtime", "cloud_runtime", "app"):
        for path in sorted((REPO / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text())
            consts = {t.id: n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                      for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "create_run":
                    kw = next((k.value for k in node.keywords if k.arg == "kind"), None)
                    kind = "eval" if kw is None else kw.value if isinstance(kw, ast.Constant) else \
                        consts.get(kw.id, "(computed)") if isinstance(kw, ast.Name) else "(computed)"
                    found.append((str(path.relative_to(REPO)), node.lineno, kind))
    return found


def test_every_create_run_call_records_a_run_kind() -> None:
    calls = _create_run_kinds()
    assert len(calls) >= 8
    bad = [c for c in calls if c[2] not in RUN_KINDS and c[2] != "(computed)"]
    assert not bad, f"create_run with a kind outside RUN_KINDS: {bad}"
    computed = {c[0] for c in calls if c[2] == "(computed)"}
    # probe or validate, checked by probe_env; an eval's kind is its options' (eval, or validate's token check)
    assert computed <= {"workbench/runs/probe.py", "workbench/runs/evaluate.py"}, computed
    from workbench.runs.evaluate import EvalOptions

    assert EvalOptions(env="arithmetic").kind == "eval"


def test_parse_kinds() -> None:
    assert parse_kinds(None) == USER_KINDS and parse_kinds(()) == USER_KINDS
    assert parse_kinds(["validate,probe"]) == ("probe", "validate")
    assert parse_kinds("ALL") == tuple(RUN_KINDS)


#: The schema version that added ``ix_run_kind_created``.
KIND_INDEX_VERSION = 8


def test_an_old_store_gains_the_kind_index(tmp_path: Path) -> None:
    """A store of the version before the kind index (no ix_run_kind_created) reaches it when opened, and the
    listing reads it."""
    path = tmp_path / "old.db"
    con = sqlite3.connect(path, isolation_level=None)
    for i, migrate in enumerate(MIGRATIONS[:KIND_INDEX_VERSION - 1]):
        migrate(con)
        con.execute(f"PRAGMA user_version={i + 1}")
    con.execute("PRAGMA application_id=0x57424E31")
    row = {**RUN_DEFAULTS, "id": "old-probe", "kind": "probe", "env_name": "e", "created_at": 1.0}
    con.execute(f"INSERT INTO run ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", tuple(row.values()))
    assert not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'ix_run_kind_created'").fetchone()
    con.close()
    store = Store(path)
    try:
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert store.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'ix_run_kind_created'").fetchone()
        plan = " ".join(r[-1] for r in store.conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM run WHERE kind IN ('eval', 'train') ORDER BY created_at DESC"))
        assert "ix_run_kind_created" in plan, plan
        assert list_runs(store.conn) == [] and [r["id"] for r in list_runs(store.conn, kinds=["probe"])] == ["old-probe"]
    finally:
        store.close()


@pytest.mark.parametrize(("kinds", "expected"), [
    (None, {"eval"}),
    (["validate"], {"validate"}),
    (["probe,eval"], {"probe", "eval"}),
    (["all"], {"eval", "probe", "validate"}),
])
async def test_mcp_list_runs_and_search_rollouts_take_kinds(session: Session, tmp_path: Path,
                                                            kinds: list[str] | None, expected: set[str]) -> None:
    from tests.workbench.test_mcp_server import call, serve

    args = {} if kinds is None else {"kinds": kinds}
    async with serve(session.env, tmp_path) as s:
        runs = (await call(s, "list_runs", limit=50, **args))["runs"]
        assert {r["kind"] for r in runs} == expected
        cli_runs = session.json("runs", "--limit", "50", *(("--kind", *kinds) if kinds else ()))["runs"]
        assert [r["id"] for r in runs] == [r["id"] for r in cli_runs]  # one use case behind both faces
        found = await call(s, "search_rollouts", limit=500, **args)
        kinds_of_run = session.kinds()
        assert {kinds_of_run[r["run_id"]] for r in found["rollouts"]} == expected
        assert found["count"] == len(found["rollouts"])
        pipeline = next((r for r in runs if r["kind"] in PIPELINE_KINDS), None)
        if pipeline is not None:
            opened = await call(s, "list_runs", run=pipeline["id"])
            assert [m["id"] for m in opened["pipeline"]["runs"]] == pipeline["members"]
        bad = await s.call_tool("list_runs", {"kinds": ["nope"]})
        assert bad.is_error and "nope" in str(bad.content) and "validate" in str(bad.content)


@pytest.mark.parametrize("kinds", [USER_KINDS, ("probe",), ("validate", "eval"), None])
@pytest.mark.parametrize("where", [
    {"env": "arithmetic"},
    {"env": "arithmetic", "min_reward": 0.5},
    {"max_reward": 0.0},
    {"model": "mock-model"},
    {"error_kind": "none"},
    {"env": "arithmetic", "min_reward": 0.1, "sort": "-reward"},
])
def test_the_kind_filter_with_others_matches_a_plain_query(session: Session, kinds: tuple[str, ...] | None,
                                                           where: dict[str, Any]) -> None:
    """Whichever way the count and the page are planned (a subtraction, the run index, a test per row), they
    are what a plain query finds."""
    sql = "SELECT r.id, r.reward, r.pk FROM rollout r JOIN run ON run.id = r.run_id WHERE 1"
    args: list[Any] = []
    if kinds is not None:
        sql += f" AND run.kind IN ({', '.join('?' * len(kinds))})"
        args += kinds
    for key, clause in (("env", "r.env_name = ?"), ("min_reward", "r.reward >= ?"), ("max_reward", "r.reward <= ?"),
                        ("model", "r.model = ?")):
        if key in where:
            sql += f" AND {clause}"
            args.append(where[key])
    if where.get("error_kind") == "none":
        sql += " AND r.error_kind IS NULL"
    con = sqlite3.connect(session.db)
    try:
        expected = con.execute(sql, args).fetchall()
        f = RolloutFilter(kinds=kinds, **where)
        assert count_rollouts(con, f) == len(expected)
        page = page_rollouts(con, f, limit=1000)
        if where.get("sort") == "-reward":
            expected.sort(key=lambda r: (-r[1], -r[2]))
        else:
            expected.sort(key=lambda r: r[2])
        assert [r.id for r in page] == [r[0] for r in expected]
    finally:
        con.close()
