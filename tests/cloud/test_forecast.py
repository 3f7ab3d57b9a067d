"""``workbench_cloud.forecast``: the plan and budget verdicts the app shows are the CLI's own, and the
local estimate is device-seconds measured from earlier local launches × the local price."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from workbench_cloud.forecast import (
    DOES_NOT_FIT,
    bundled_configs,
    cloud_forecast,
    local_forecast,
    measured_step_s,
)

from tests.helpers import CliResult, stderr_lines
from workbench.cost.gpu_prices import set_price
from workbench.store import Store

BIG = Path(__file__).resolve().parents[2] / "cloud_runtime" / "configs" / "long-context-28node.toml"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    s = Store(tmp_path / "wb.db")
    yield s  # type: ignore[misc]
    s.close()


def _monthly(tmp_path: Path, usd: float) -> None:
    (tmp_path / "cfg" / "workbench").mkdir(parents=True, exist_ok=True)
    (tmp_path / "cfg" / "workbench" / "tui.toml").write_text(f"[budget]\nmonthly_usd = {usd}\n")


def _run(store: Store, run_id: str, *, backend: str | None, status: str = "completed", steps: int = 0,
         device_s: float = 0.0, kind: str = "train", at: float = 0.0) -> None:
    config = {"launch": {"backend": backend, "budget_usd": None}} if backend else {}
    store.create_run(run_id, kind=kind, env_name="e", model="m", status=status, created_at=at or time.time(),
                     config=config)
    for step in range(1, steps + 1):
        store.record_train(run_id, step, "step", {})
    if device_s:
        store.conn.execute("INSERT INTO cost_event (run_id, kind, provider, model, quantity, unit, usd, created_at) "
                           "VALUES (?, 'gpu_seconds', 'local', 'cpu', ?, 'gpu_seconds', 0, ?)",
                           (run_id, device_s, time.time()))
    store.conn.commit()


def test_bundled_configs() -> None:
    assert BIG in bundled_configs()


def test_measured_step_seconds_only_from_finished_local_launches(store: Store) -> None:
    assert measured_step_s(store.conn) == (None, 0)
    _run(store, "a", backend="local", steps=10, device_s=100.0, at=1000)
    _run(store, "b", backend="local", steps=10, device_s=300.0, at=2000)
    _run(store, "running", backend="local", status="running", steps=5, device_s=500.0, at=3000)
    _run(store, "modal", backend="modal", steps=5, device_s=500.0, at=3000)
    _run(store, "plain-train", backend=None, steps=5, device_s=500.0, at=3000)
    _run(store, "no-steps", backend="local", steps=0, device_s=50.0, at=3000)
    assert measured_step_s(store.conn) == (pytest.approx(20.0), 2)  # (100 + 300) / (10 + 10)
    assert measured_step_s(store.conn, limit=1) == (pytest.approx(30.0), 1)  # the newest only


def test_local_forecast_prices_and_caps(store: Store, tmp_path: Path) -> None:
    fc = local_forecast(store.conn, 40, None)
    assert fc.usd_per_s == 0 and fc.total_usd == 0.0 and fc.cap_usd is None and fc.refusal is None
    set_price("local", "cpu", 0.01)
    assert local_forecast(store.conn, 40, 1.0).total_usd is None  # priced but never measured: unknown
    _run(store, "a", backend="local", steps=10, device_s=50.0)
    fc = local_forecast(store.conn, 40, 1.0)
    assert fc.device_s == pytest.approx(200.0) and fc.total_usd == pytest.approx(2.0)
    assert fc.cap_usd == 1.0 and fc.steps_within_cap == 20
    _monthly(tmp_path, 0.5)
    fc = local_forecast(store.conn, 40, 1.0)
    assert fc.cap_usd == pytest.approx(0.5) and "left of the $0.50 monthly budget" in fc.cap_why
    store.conn.execute("INSERT INTO cost_event (run_id, kind, provider, model, quantity, unit, usd, created_at) "
                       "VALUES ('x', 'api_tokens', 'openai', 'gpt', 1, 'tokens', 0.6, ?)", (time.time(),))
    store.conn.commit()
    fc = local_forecast(store.conn, 40, 1.0)
    assert fc.refusal and "monthly budget of $0.50 is spent" in fc.refusal


def test_cloud_forecast_refuses_as_the_cli_does(store: Store, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    fc = cloud_forecast(store.conn, BIG, max_steps=1000, budget_usd=1000)
    assert fc.within_run_budget is False and fc.within_month is None
    res = cli("launch", "arithmetic", "--config", BIG, "--plan", "--budget", "1000", "--max-steps", "1000")
    assert fc.refusal == str(fc.budget_error)  # the domain's words: the plan's fields by their own names
    flags = {"LaunchPlan.max_steps": "--max-steps", "LaunchPlan.budget": "--budget"}
    assert res.rc != 0 and stderr_lines(res.stderr)[-1] == f"error: {fc.budget_error.render(flags.__getitem__)}"

    fc = cloud_forecast(store.conn, BIG)
    assert fc.refusal is None and fc.plan.max_steps == 1000 and fc.plan.fits
    _monthly(tmp_path, 3_000)
    fc = cloud_forecast(store.conn, BIG, max_steps=50)
    assert fc.within_month is False and "exceeds what is left of the monthly budget" in (fc.refusal or "")
    assert fc.month.left_usd == 3_000 and fc.plan.max_steps == 50

    squeezed = tmp_path / "squeezed.toml"
    squeezed.write_text(BIG.read_text().replace("trainer_nodes = 10", "trainer_nodes = 1")
                        .replace("inference_nodes = 18", "inference_nodes = 27"))
    fc = cloud_forecast(store.conn, squeezed, max_steps=1)
    assert not fc.plan.fits and fc.refusal == DOES_NOT_FIT
