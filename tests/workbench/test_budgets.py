"""Per-run and monthly budgets: which cap a launched run gets, and when a plan is refused."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from workbench.cost.budgets import check_monthly, month_start, run_cap
from workbench.errors import ConfigError
from workbench.store import Store


def _store(tmp_path: Path, spent: float) -> Store:
    store = Store(tmp_path / "wb.db")
    store.create_run("r", kind="train", env_name="arithmetic")
    for usd, when in ((spent, time.time()), (999.0, month_start() - 10)):  # last month's spend does not count
        store.conn.execute("INSERT INTO cost_event (run_id, kind, provider, model, quantity, unit, usd, created_at) "
                           "VALUES ('r', 'gpu_seconds', 'local', 'cpu', 1, 'gpu_seconds', ?, ?)", (usd, when))
    return store


def test_caps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    store = _store(tmp_path, 7.0)
    assert run_cap(store.conn, 2.0) == (2.0, "run budget $2.00")  # no monthly budget set
    assert run_cap(store.conn, None) == (None, "no budget")
    (tmp_path / "cfg" / "workbench").mkdir(parents=True)
    (tmp_path / "cfg" / "workbench" / "tui.toml").write_text("[budget]\nmonthly_usd = 10\n")
    assert run_cap(store.conn, 5.0) == (3.0, "$3.00 left of the $10.00 monthly budget")
    assert run_cap(store.conn, 1.0) == (1.0, "run budget $1.00")
    check_monthly(store.conn, 3.0)
    with pytest.raises(ConfigError, match=r"\$3.00 of \$10.00 \(\$7.00 spent this month\)"):
        check_monthly(store.conn, 3.5)
    (tmp_path / "cfg" / "workbench" / "tui.toml").write_text("[budget]\nmonthly_usd = -1\n")
    with pytest.raises(ConfigError, match="non-negative"):
        run_cap(store.conn, 1.0)


def test_costs_command(tmp_path: Path, cli: object) -> None:
    import json

    store = _store(tmp_path, 7.0)
    store.create_run("launched", kind="train", env_name="arithmetic",
                     config={"launch": {"backend": "local", "budget_usd": 2.0}})
    store.conn.execute("INSERT INTO cost_event (run_id, kind, provider, model, quantity, unit, usd, created_at) "
                       "VALUES ('launched', 'gpu_seconds', 'local', 'cpu', 1, 'gpu_seconds', 0.5, ?)", (time.time(),))
    store.close()
    rc, out, err = cli("costs", "--by", "provider", "--db", str(tmp_path / "wb.db"), "--json")  # type: ignore[operator]
    assert rc == 0, err
    d = json.loads(out.strip().splitlines()[-1])
    assert d["total_usd"] == pytest.approx(1006.5) and d["month_usd"] == pytest.approx(7.5)
    assert [(r["key"], r["usd"]) for r in d["rows"]] == [("local", pytest.approx(1006.5))]
    assert [(r["run_id"], r["spent_usd"], r["budget_usd"]) for r in d["runs"]] == [("launched", 0.5, 2.0)]
    rc, out, _ = cli("costs", "--db", str(tmp_path / "wb.db"))  # type: ignore[operator]
    assert rc == 0 and "launched run launched (arithmetic, running): $0.5000 of $2.00 (25%)" in out
