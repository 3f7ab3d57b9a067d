"""The pieces the Launch dialog and the Costs screen share to show what a planned run will cost:
a config picker (the bundled run configs, or any path) and the text of a cloud or local forecast
(:mod:`workbench_cloud.forecast`, the numbers ``workbench launch --plan`` and the budget checks use)."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Input, Select
from workbench_app.format import for_app
from workbench_cloud.forecast import (
    CONFIGS_DIR,
    CloudForecast,
    LocalForecast,
    Month,
    bundled_configs,
    local_price_hint,
)
from workbench_cloud.plan import fmt

LABEL_WIDTH = 12


def fusd(v: float) -> str:
    """Dollars at the precision that matters: $80,123 · $12.50 · $0.0246."""
    if abs(v) >= 100:
        return f"${v:,.0f}"
    return f"${v:,.2f}" if abs(v) >= 1 else f"${v:.4f}"


def fduration(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 3600:,.1f} h ({seconds / 86400:.2f} days)"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


class ConfigPicker(Horizontal):
    """A run config: pick a bundled one or type a path. The Input (``id=input_id``) holds the value;
    picking a bundled config fills it in, typing another path clears the pick."""

    DEFAULT_CSS = """
    ConfigPicker { height: 3; }
    ConfigPicker Select { width: 34; }
    ConfigPicker Input { width: 1fr; }
    """

    def __init__(self, input_id: str, placeholder: str, value: str = "", id: str | None = None) -> None:
        super().__init__(id=id)
        self.input_id, self.placeholder, self.initial = input_id, placeholder, value

    def compose(self) -> ComposeResult:
        options = [(p.name, str(p)) for p in bundled_configs()]
        yield Select(options, prompt="bundled configs", id=f"{self.input_id}-pick",
                     value=self.initial if self.initial in {v for _, v in options} else Select.NULL)
        yield Input(self.initial, placeholder=self.placeholder, id=self.input_id)

    @property
    def value(self) -> str:
        return self.query_one(f"#{self.input_id}", Input).value

    @on(Select.Changed)
    def _picked(self, event: Select.Changed) -> None:
        if isinstance(event.value, str):
            self.query_one(f"#{self.input_id}", Input).value = event.value

    @on(Input.Changed)
    def _typed(self, event: Input.Changed) -> None:
        select = self.query_one(Select)
        if select.value is not Select.NULL and select.value != event.value:
            select.clear()


def _row(t: Text, label: str, *parts: str | tuple[str, str]) -> None:
    if t:
        t.append("\n")
    t.append(f"{label:<{LABEL_WIDTH}}", style="bold")
    for p in parts:
        t.append(*p) if isinstance(p, tuple) else t.append(p)


def _verdict(ok: bool | None, yes: str = "within", no: str = "exceeded") -> tuple[str, str]:
    return (yes, "green") if ok else (no, "bold red")


def month_text(month: Month, estimate: float | None) -> list[str | tuple[str, str]]:
    if month.budget_usd is None:
        return ["no monthly budget"]
    left = month.left_usd or 0.0
    parts: list[str | tuple[str, str]] = [f"{fusd(left)} left of {fusd(month.budget_usd)} this month"]
    if estimate is not None:
        parts += [": ", _verdict(estimate <= left)]
    return parts


def cloud_text(fc: CloudForecast) -> Text:
    """The plan in a few lines: cluster, memory fit, step, money and time, both budgets, the verdict."""
    p, t = fc.plan, Text()
    d = p.to_dict()
    _row(t, "cluster", f"{p.provider} {p.nodes} × {p.gpus_per_node} {p.gpu} = {p.total_gpus} GPUs · trainer "
         f"{fmt(d['trainer_nodes'])} nodes · inference {fmt(d['inference_nodes'])} nodes "
         f"({p.inference_replicas} × TP{p.inference_tp})")
    tr, inf = p.memory["trainer"], p.memory["inference"]
    _row(t, "memory/GPU", f"trainer {tr['total_gb']:.1f} of {tr['usable_gb']:.1f} GB ",
         _verdict(tr["fits"], "fits", "does not fit"), f" · inference {inf['total_gb']:.1f} of "
         f"{inf['usable_gb']:.1f} GB ", _verdict(inf["fits"], "fits", "does not fit"))
    _row(t, "step", f"{p.step_time_s:,.1f} s ({p.inference_bound}-bound, {p.mode}) · "
         f"{fusd(p.usd_per_step)}/step at ${p.usd_per_gpu_s:g}/GPU-s")
    _row(t, "total", (fusd(p.total_usd), "bold"), f" · wall {fduration(p.wall_s)} for {p.max_steps:,} steps")
    budget: list[str | tuple[str, str]] = ["run: no budget"] if p.budget_usd is None else [
        f"run {fusd(p.budget_usd)}: ", _verdict(fc.within_run_budget)]
    _row(t, "budget", *budget, " · month: ", *month_text(fc.month, p.total_usd))
    if fc.refusal:
        _row(t, "refused", (for_app(fc.refusal), "bold red"))
    return t


def local_text(fc: LocalForecast) -> Text:
    """The local backend's cost: device-seconds × the local price, and the cap its budget guard enforces."""
    t = Text()
    price = f"${fc.usd_per_s:g}/device-s"
    _row(t, "device", f"this machine at {price}" + ("" if fc.usd_per_s else f" (set: {local_price_hint()})"))
    if fc.s_per_step is None:
        measured = "not measured yet (no finished local launch)"
    else:
        runs = f"{fc.measured_runs} local launch{'es' if fc.measured_runs > 1 else ''}"
        measured = f"{fc.s_per_step:,.1f} device-s/step measured over {runs}"
    _row(t, "step", measured)
    total = fc.total_usd
    if total is None:
        _row(t, "estimate", f"unknown: {fc.max_steps:,} steps × device-s/step × {price}")
    elif fc.device_s is None:
        _row(t, "estimate", (fusd(total), "bold"), f" for {fc.max_steps:,} steps (free at $0/device-s)")
    else:
        _row(t, "estimate", (fusd(total), "bold"), f" = {fc.device_s:,.0f} device-s × {price} for "
             f"{fc.max_steps:,} steps (~{fduration(fc.device_s)})")
    if fc.refusal:
        _row(t, "refused", (for_app(fc.refusal), "bold red"))
        return t
    _row(t, "cap", fc.cap_why + (" (the budget guard stops the run there)" if fc.cap_usd is not None else ""))
    if fc.steps_within_cap is not None:
        _row(t, "warning", (f"the estimate exceeds the cap: the run will be stopped after about "
                            f"{fc.steps_within_cap:,} steps", "yellow"))
    return t


def short_path(path: str | Path) -> str:
    """A bundled config by its file name, any other by its path."""
    p = Path(path)
    return p.name if p.parent == CONFIGS_DIR else str(p)


def forecast_text(fc: CloudForecast, config: str | Path) -> Text:
    """A planned run against the money left this month: the Costs screen's forecast panel."""
    p, t = fc.plan, Text()
    _row(t, "plan", f"{short_path(config)} · {p.provider} {p.nodes} × {p.gpus_per_node} {p.gpu} = "
         f"{p.total_gpus} GPUs · {p.max_steps:,} steps")
    _row(t, "total", (fusd(p.total_usd), "bold"), f" · wall {fduration(p.wall_s)} · {fusd(p.usd_per_step)}/step")
    left = fc.month.left_usd
    if left is None or fc.month.budget_usd is None:
        _row(t, "month", f"{fusd(fc.month.spent_usd)} spent; no monthly budget to hold it against "
             "([budget] monthly_usd in tui.toml)")
    elif p.total_usd <= left:
        _row(t, "month", f"{fusd(left)} left of {fusd(fc.month.budget_usd)}: ", ("within", "green"),
             f", {fusd(left - p.total_usd)} would remain")
    else:
        fixed = p.total_usd - p.usd_per_step * p.max_steps
        covers = max(0, int((left - fixed) / p.usd_per_step)) if p.usd_per_step else 0
        _row(t, "month", f"{fusd(left)} left of {fusd(fc.month.budget_usd)}: ",
             (f"exceeded by {fusd(p.total_usd - left)}", "bold red"), f" (the month covers {covers:,} steps)")
    if fc.refusal and fc.within_month is not False:  # a refusal for another reason: the run budget, memory
        _row(t, "refused", (for_app(fc.refusal), "bold red"))
    return t
