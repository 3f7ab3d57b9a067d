"""Launch from the app: ``L`` on an environment opens the dialog; bad input is shown, nothing launched;
confirming calls the launcher (``launch_local`` in the app, a recorder here: the real pipeline is
tested in tests/cloud/test_launch_local.py) with the resolved config; ``S`` on Runs stops a launched run."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Button, Input, RadioButton, Select, Static
from workbench_app.config import config_path
from workbench_app.main import WorkbenchApp
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.screens.launch import DEFAULT_MAX_STEPS, MODAL_REASON, LaunchScreen, parse_inputs
from workbench_app.screens.runs import RunsScreen
from workbench_cloud.launch import Launched
from workbench_cloud.plan import load_launch_config, make_plan

from tests.app.conftest import SIZE, T0, screen_text, wait_until
from workbench.cost.budgets import month_spent_usd
from workbench.cost.gpu_prices import set_price
from workbench.store import Store

# slow: a Pilot run per input of the launch dialog
pytestmark = pytest.mark.slow


class Recorder:
    """Stands in for ``launch_local``: records its arguments, reports a start, returns at once."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, Any, dict[str, Any]]] = []

    def __call__(self, store: Any, run: Any, **kwargs: Any) -> Launched:
        self.calls.append((store, run, kwargs))
        if kwargs.get("on_start"):
            kwargs["on_start"]("1130-fake01")
        return Launched("1130-fake01", "completed", "hash", 0.125, {"steps": run.loop.max_steps})


def _make(make_app: Callable[..., WorkbenchApp], launcher: Recorder, mode: str = "environments") -> WorkbenchApp:
    app = make_app(mode=mode)
    app.launcher = launcher
    return app


def _messages(app: WorkbenchApp) -> list[str]:
    return [n.message for n in app._notifications]


async def _open_dialog(pilot: Any) -> LaunchScreen:
    app = pilot.app
    screen = app.screen
    assert isinstance(screen, EnvironmentsScreen)
    await wait_until(pilot, lambda: "adder" in screen.envs, what="the environment")
    await pilot.press("L")
    await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch dialog")
    return app.screen


def _fill(dialog: LaunchScreen, steps: str = "3", budget: str = "", config: str = "") -> None:
    dialog.query_one("#launch-steps", Input).value = steps
    dialog.query_one("#launch-budget", Input).value = budget
    dialog.query_one("#launch-config", Input).value = config


def _error(dialog: LaunchScreen) -> str:
    return str(dialog.query_one("#launch-error", Static).render())


def test_parse_inputs(tmp_path: Path) -> None:
    assert parse_inputs("5", "", "") == (5, None, None)
    assert parse_inputs(" 7 ", "$1.5", "") == (7, 1.5, None)
    for steps, budget, msg in (("x", "", "whole number"), ("0", "", "at least 1"), ("3", "abc", "number of USD"),
                               ("3", "-1", "negative"), ("3", "nan", "negative")):
        with pytest.raises(ValueError, match=msg):
            parse_inputs(steps, budget, "")
    with pytest.raises(ValueError, match="does not exist"):
        parse_inputs("3", "", str(tmp_path / "missing.toml"))


async def test_dialog_shows_backends_and_bad_budget_launches_nothing(make_app: Callable[..., WorkbenchApp]) -> None:
    rec = Recorder()
    app = _make(make_app, rec)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await _open_dialog(pilot)
        assert dialog.query_one("#backend-local", RadioButton).value
        modal = dialog.query_one("#backend-modal", RadioButton)
        assert not modal.value and MODAL_REASON in str(modal.label)
        assert MODAL_REASON in screen_text(app)
        _fill(dialog, budget="lots")
        await pilot.press("enter")
        await wait_until(pilot, lambda: "budget must be a number" in _error(dialog), what="the inline error")
        assert app.screen is dialog and not rec.calls
        _fill(dialog, steps="many")
        await pilot.press("enter")
        await wait_until(pilot, lambda: "whole number" in _error(dialog), what="the steps error")
        await pilot.press("escape")
        assert isinstance(app.screen, EnvironmentsScreen)
        await pilot.pause(0.2)
        assert not rec.calls


async def test_bad_config_file_shows_the_config_error(make_app: Callable[..., WorkbenchApp],
                                                      tmp_path: Path) -> None:
    rec = Recorder()
    app = _make(make_app, rec)
    bad = tmp_path / "bad.toml"
    bad.write_text("[loop]\nmax_steps = 2\n[nonsense]\nx = 1\n")
    async with app.run_test(size=SIZE) as pilot:
        dialog = await _open_dialog(pilot)
        _fill(dialog, config=str(tmp_path / "missing.toml"))
        await pilot.press("enter")
        await wait_until(pilot, lambda: "does not exist" in _error(dialog), what="the missing-file error")
        _fill(dialog, config=str(bad))
        await pilot.press("enter")
        await wait_until(pilot, lambda: "unknown section 'nonsense'" in _error(dialog), timeout=60,
                         what="the ConfigError text")
        assert app.screen is dialog and not rec.calls and not dialog.busy


async def test_confirm_calls_the_launcher(make_app: Callable[..., WorkbenchApp], env_dir: Path,
                                          tmp_path: Path) -> None:
    rec = Recorder()
    app = _make(make_app, rec)
    cfg = tmp_path / "run.toml"
    cfg.write_text("[loop]\nmax_steps = 50\nrollouts_per_task = 2\n")
    async with app.run_test(size=SIZE) as pilot:
        dialog = await _open_dialog(pilot)
        _fill(dialog, steps="3", budget="0.5", config=str(cfg))
        await pilot.pause()  # the plan just shown lays the dialog out again: click where the button now is
        await pilot.click("#launch-ok")
        await wait_until(pilot, lambda: rec.calls, timeout=60, what="the launch")
        store, run, kwargs = rec.calls[0]
        assert isinstance(store, Store)
        assert run.env == str(env_dir / "adder.py")
        assert run.loop.max_steps == 3 and run.loop.rollouts_per_task == 2  # the flag beats the file
        assert kwargs["budget_usd"] == 0.5 and kwargs["threads"] == 1 and callable(kwargs["on_start"])
        assert isinstance(app.screen, EnvironmentsScreen)
        await wait_until(pilot, lambda: any("run 1130-fake01 completed, spent $0.1250" in m for m in _messages(app)),
                         what="the done notification")
        assert any("run 1130-fake01 started" in m for m in _messages(app))


async def test_launcher_failure_is_a_notification(make_app: Callable[..., WorkbenchApp]) -> None:
    from workbench.errors import ConfigError

    def failing(store: Any, run: Any, **kwargs: Any) -> Launched:
        raise ConfigError("the bundle holds a secret")

    app = make_app()
    app.launcher = failing
    async with app.run_test(size=SIZE) as pilot:
        dialog = await _open_dialog(pilot)
        _fill(dialog, steps="2")
        await pilot.press("enter")
        await wait_until(pilot, lambda: any("the bundle holds a secret" in m for m in _messages(app)), timeout=60,
                         what="the failure notification")
        assert isinstance(app.screen, EnvironmentsScreen)


async def test_stop_key_on_runs(make_app: Callable[..., WorkbenchApp], store_file: Path, tmp_path: Path) -> None:
    stream = tmp_path / "stream"
    with Store(store_file) as store:  # a launched run, still running: the newest, so the first row
        store.create_run("1114-zlaunch", kind="train", env_name="adder", model="m", status="running",
                         created_at=T0 + 7200, config={"launch": {"backend": "local", "budget_usd": None,
                                                                  "stream": {"kind": "dir", "path": str(stream)}}})
    app = make_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        await wait_until(pilot, lambda: len(screen.runs) == 3, what="the runs")
        assert screen._selected_id() == "1114-zlaunch"
        await pilot.press("S")
        await wait_until(pilot, lambda: any("asked run 1114-zlaunch to stop" in m for m in _messages(app)),
                         what="the stop notification")
        assert (stream / "stop").exists()
        await pilot.press("down")
        await wait_until(pilot, lambda: screen._selected_id() == "1114-bbbbbb", what="an eval run")
        await pilot.press("S")
        await wait_until(pilot, lambda: any("was not launched" in m for m in _messages(app)),
                         what="the not-launched notification")


# -- the plan and cost estimate in the dialog ------------------------------------------------------
BIG_CONFIG = Path(__file__).resolve().parents[2] / "cloud_runtime" / "configs" / "long-context-28node.toml"


def _plan_text(dialog: LaunchScreen) -> str:
    return str(dialog.query_one("#launch-plan", Static).render())


def _launch_disabled(dialog: LaunchScreen) -> bool:
    return dialog.query_one("#launch-ok", Button).disabled


async def _settled(pilot: Any, dialog: LaunchScreen, backend: str, inputs: tuple[Any, ...]) -> Any:
    """Wait until the dialog shows the forecast of exactly these inputs."""
    return await wait_until(pilot, lambda: dialog.forecast is not None and dialog.forecast.backend == backend
                            and dialog.forecast.inputs == inputs and dialog.forecast, timeout=60,
                            what=f"the {backend} forecast of {inputs}")


def _monthly(usd: float) -> None:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"[budget]\nmonthly_usd = {usd}\n")


def _spend(store_file: Path, usd: float, run_id: str = "1114-aaaaaa") -> None:
    with Store(store_file) as store:
        store.conn.execute("INSERT INTO cost_event (run_id, kind, provider, model, quantity, unit, usd, created_at) "
                           "VALUES (?, 'api_tokens', 'openai', 'gpt', 1000, 'tokens', ?, ?)", (run_id, usd, time.time()))
        store.conn.commit()


async def test_modal_plan_of_the_28_node_config_and_its_budget_refusal(
        make_app: Callable[..., WorkbenchApp], store_file: Path) -> None:
    rec = Recorder()
    app = _make(make_app, rec)
    expected = make_plan(load_launch_config(BIG_CONFIG, {"loop.max_steps": 1000}, "adder"), max_steps=1000)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await _open_dialog(pilot)
        await _settled(pilot, dialog, "local", (DEFAULT_MAX_STEPS, None, None))
        await pilot.click("#backend-modal")
        dialog.query_one("#launch-config-pick", Select).value = str(BIG_CONFIG)  # the bundled-config picker
        await wait_until(pilot, lambda: dialog.query_one("#launch-config", Input).value == str(BIG_CONFIG),
                         what="the picked config in the path field")
        _fill(dialog, steps="1000", budget="1000", config=str(BIG_CONFIG))
        fc = await _settled(pilot, dialog, "modal", (1000, 1000.0, str(BIG_CONFIG)))
        text = _plan_text(dialog)
        for frag in ("modal 28 × 8 H200 = 224 GPUs", "trainer 10 nodes", "inference 18 nodes (18 × TP8)",
                     f"trainer {expected.memory['trainer']['total_gb']:.1f} of 126.9 GB fits",
                     f"{expected.step_time_s:,.1f} s (bandwidth-bound, async)", f"${expected.usd_per_step:,.2f}/step",
                     f"${expected.total_usd:,.0f}", f"{expected.wall_s / 86400:.2f} days", "for 1,000 steps",
                     "run $1,000: exceeded", "month: no monthly budget",
                     "plan refused: estimated", "exceeds the budget of $1,000; the budget covers"):
            assert frag in text, (frag, text)
        assert 70_000 < fc.result.plan.total_usd < 90_000  # README: about $80k, 3.3 days, ~282 s per step
        assert fc.result.plan.total_usd == pytest.approx(expected.total_usd)
        assert _launch_disabled(dialog)
        dialog.query_one("#launch-budget", Input).focus()
        await pilot.press("enter")  # enter in a field still asks: the answer is the refusal, nothing launches
        await wait_until(pilot, lambda: "exceeds the budget" in _error(dialog), what="the budget refusal")

        _fill(dialog, steps="1000", budget="100000", config=str(BIG_CONFIG))  # within the run budget
        fc = await _settled(pilot, dialog, "modal", (1000, 100000.0, str(BIG_CONFIG)))
        assert "run $100,000: within" in _plan_text(dialog) and fc.result.refusal is None
        assert fc.refusal is None and not _launch_disabled(dialog) and "never run on Modal" in _plan_text(dialog)

        _monthly(50_000)  # now the month is what refuses it
        _spend(store_file, 1200.0)
        _fill(dialog, steps="1000", budget="", config=str(BIG_CONFIG))
        fc = await _settled(pilot, dialog, "modal", (1000, None, str(BIG_CONFIG)))
        text = _plan_text(dialog)
        assert "$48,800 left of $50,000 this month: exceeded" in text, text
        assert "exceeds what is left of the monthly budget" in text and fc.result.within_month is False

        _fill(dialog, steps="3", budget="", config=str(BIG_CONFIG))  # a short run fits the month
        fc = await _settled(pilot, dialog, "modal", (3, None, str(BIG_CONFIG)))
        assert "this month: within" in _plan_text(dialog) and fc.result.refusal is None
        await pilot.press("escape")
    assert not rec.calls


async def test_modal_plan_errors_are_inline(make_app: Callable[..., WorkbenchApp], tmp_path: Path) -> None:
    no_cloud = tmp_path / "plain.toml"
    no_cloud.write_text("[loop]\nmax_steps = 2\n")
    broken = tmp_path / "broken.toml"
    broken.write_text("[cloud\nnodes = ")
    app = _make(make_app, Recorder())
    async with app.run_test(size=SIZE) as pilot:
        dialog = await _open_dialog(pilot)
        await pilot.click("#backend-modal")
        fc = await _settled(pilot, dialog, "modal", (DEFAULT_MAX_STEPS, None, None))
        assert "no plan: the plan needs cloud.params_b" in _plan_text(dialog) and "[cloud] table" in _plan_text(dialog)
        assert fc.refusal and _launch_disabled(dialog)
        _fill(dialog, steps="2", config=str(broken))
        await _settled(pilot, dialog, "modal", (2, None, str(broken)))
        assert "is not valid TOML" in _plan_text(dialog)
        _fill(dialog, steps="2", config=str(no_cloud))
        await _settled(pilot, dialog, "modal", (2, None, str(no_cloud)))
        assert "the plan needs cloud." in _plan_text(dialog)
        _fill(dialog, steps="two")
        await wait_until(pilot, lambda: "whole number" in _plan_text(dialog), what="the input error in the plan")
        assert isinstance(app.screen, LaunchScreen)


async def test_local_estimate_cap_and_a_spent_month(make_app: Callable[..., WorkbenchApp], store_file: Path) -> None:
    rec = Recorder()
    app = _make(make_app, rec)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await _open_dialog(pilot)
        await _settled(pilot, dialog, "local", (DEFAULT_MAX_STEPS, None, None))
        text = _plan_text(dialog)
        assert "this machine at $0/device-s" in text and "$0.0000 for 20 steps (free at $0/device-s)" in text
        assert "cap         no budget" in text and not _launch_disabled(dialog)
        _fill(dialog, steps="5", config=str(BIG_CONFIG))
        await _settled(pilot, dialog, "local", (5, None, str(BIG_CONFIG)))
        assert "this config has a [cloud] table: pick modal" in _plan_text(dialog)

        _monthly(1.0)
        _spend(store_file, 1.5)
        _fill(dialog, steps="4", budget="0.25")
        fc = await _settled(pilot, dialog, "local", (4, 0.25, None))
        assert "the monthly budget of $1.00 is spent" in _plan_text(dialog) and fc.refusal
        assert _launch_disabled(dialog)
        await pilot.press("enter")  # the confirm path checks the cap itself
        await wait_until(pilot, lambda: "monthly budget of $1.00 is spent" in _error(dialog), timeout=60,
                         what="the refusal on confirm")
        assert app.screen is dialog and not rec.calls and not dialog.busy


async def test_local_confirm_hands_the_guard_the_monthly_cap(make_app: Callable[..., WorkbenchApp],
                                                             store_file: Path) -> None:
    """As `workbench launch --backend local`: the cap is the run budget or what is left of the month."""
    _monthly(5.0)
    _spend(store_file, 4.5)
    with Store(store_file) as store:
        left = 5.0 - month_spent_usd(store.conn)  # the fixture's eval rollouts cost a little too
    assert 0.4 < left < 0.5
    rec = Recorder()
    app = _make(make_app, rec)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await _open_dialog(pilot)
        _fill(dialog, steps="2", budget="2")
        await _settled(pilot, dialog, "local", (2, 2.0, None))
        assert f"${left:.2f} left of the $5.00 monthly budget (the budget guard stops the run there)" in _plan_text(dialog)
        await pilot.pause()  # the plan just shown lays the dialog out again: click where the button now is
        await pilot.click("#launch-ok")
        await wait_until(pilot, lambda: rec.calls, timeout=60, what="the launch")
        assert rec.calls[0][2]["budget_usd"] == pytest.approx(left)


async def test_local_estimate_from_measured_launches(make_app: Callable[..., WorkbenchApp], store_file: Path) -> None:
    set_price("local", "cpu", 0.001)
    with Store(store_file) as store:  # a finished local launch: 120 device-seconds for 10 steps
        store.create_run("1114-local01", kind="train", env_name="adder", model="m", status="completed",
                         created_at=T0 + 9000, config={"launch": {"backend": "local", "budget_usd": None}})
        for step in range(1, 11):
            store.record_train("1114-local01", step, "step", {"loss": 0.1})
        store.conn.execute("INSERT INTO cost_event (run_id, kind, provider, model, quantity, unit, usd, created_at) "
                           "VALUES ('1114-local01', 'gpu_seconds', 'local', 'cpu', 120, 'gpu_seconds', 0.12, ?)",
                           (T0 + 9100,))
        store.conn.commit()
    app = _make(make_app, Recorder())
    async with app.run_test(size=SIZE) as pilot:
        dialog = await _open_dialog(pilot)
        _fill(dialog, steps="50", budget="0.3")
        fc = await _settled(pilot, dialog, "local", (50, 0.3, None))
        text = _plan_text(dialog)
        assert "12.0 device-s/step measured over 1 local launch" in text, text
        assert "$0.6000 = 600 device-s × $0.001/device-s for 50 steps" in text
        assert "stopped after about 25 steps" in text
        assert fc.refusal is None and not _launch_disabled(dialog)  # the guard stops it at the cap


async def test_a_modal_launch_needs_a_token_then_runs_the_plan(make_app: Callable[..., WorkbenchApp],
                                                               monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Confirming a Modal plan checks what `workbench launch --backend modal` checks: without a Modal token
    the dialog says which command fixes it and nothing launches; with one, the launcher gets the launch
    config and its plan (launch_modal in the app; the real pipeline is tested offline in tests/cloud)."""
    for var in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.modal.toml
    calls: list[tuple[Any, ...]] = []

    def modal_launcher(store: Any, launch: Any, plan: Any, **kwargs: Any) -> Launched:
        calls.append((launch, plan, kwargs))
        kwargs["on_start"]("1130-modal1")
        return Launched("1130-modal1", "completed", "hash", 1.5, {"steps": 3})

    rec = Recorder()
    app = _make(make_app, rec)
    app.modal_launcher = modal_launcher
    async with app.run_test(size=SIZE) as pilot:
        dialog = await _open_dialog(pilot)
        await pilot.click("#backend-modal")
        _fill(dialog, steps="3", budget="100000", config=str(BIG_CONFIG))
        fc = await _settled(pilot, dialog, "modal", (3, 100000.0, str(BIG_CONFIG)))
        assert fc.refusal is None and not _launch_disabled(dialog)
        await pilot.pause()  # the plan just shown lays the dialog out again: click where the button now is
        await pilot.click("#launch-ok")
        # the credential check runs in a worker and imports the Modal SDK: seconds on a busy machine
        await wait_until(pilot, lambda: "workbench login modal" in _error(dialog), timeout=60,
                         what="the missing-token error")
        assert app.screen is dialog and not calls and not dialog.busy

        monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
        monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
        dialog.query_one("#launch-steps", Input).focus()
        await pilot.press("enter")  # enter in a field confirms, as the Launch button does
        await wait_until(pilot, lambda: bool(calls), what="the modal launcher")
        await wait_until(pilot, lambda: any("1130-modal1 started" in m for m in _messages(app)), what="the start")
    (launch, plan, kwargs), = calls
    assert launch.run.loop.max_steps == 3 and plan.total_gpus == 224 and plan.max_steps == 3
    assert kwargs["budget_usd"] == 100000.0 and not rec.calls
    assert any("never run on Modal" in m for m in _messages(app))
