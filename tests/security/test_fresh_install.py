"""Workbench's own default store is made on first use: a fresh install lists no runs and the default
prices, while a store the user names (--db, WORKBENCH_DB) that is not there is refused, never created."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import assert_user_error, cli_environment, run_workbench


def test_a_fresh_install_lists_no_runs_and_the_default_prices(tmp_path: Path) -> None:
    env = cli_environment(tmp_path)  # no WORKBENCH_DB: the default store under XDG_DATA_HOME
    runs = run_workbench(["runs"], env)
    assert runs.rc == 0 and "no runs yet" in runs.stdout, runs
    prices = run_workbench(["prices", "list", "--json"], env)
    assert prices.rc == 0 and '"prices"' in prices.stdout and '"model"' in prices.stdout, prices
    costs = run_workbench(["costs"], env)
    assert costs.rc == 0, costs


def test_a_named_store_that_is_not_there_is_refused_and_not_created(tmp_path: Path) -> None:
    for args, extra in ((["runs", "--db", str(tmp_path / "a" / "nope.db")], {}),
                        (["runs"], {"WORKBENCH_DB": str(tmp_path / "b" / "nope.db")})):
        env = cli_environment(tmp_path, **extra)
        assert_user_error(run_workbench(args, env), "no store at")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
