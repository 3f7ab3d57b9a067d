"""``workbench launch``: plan an RL run on a GPU cluster and run it on a launch backend; ``workbench stop``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from workbench.cli.common import console, console_err, db_option, emit_json, json_option
from workbench.errors import ConfigError

#: The folder names a bundled run config is given under: the checkout's and the installed package's.
CLOUD_PACKAGE_NAMES = ("cloud_runtime", "workbench_cloud")


def bundled_configs_dir() -> Path | None:
    """The installed cloud package's folder (``configs/`` holds its run configs), or None without it."""
    import importlib.util

    spec = importlib.util.find_spec("workbench_cloud")
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def bundled_config_names() -> list[str]:
    """The bundled run configs as ``--config`` takes them from the checkout's root (and, resolved by
    :func:`resolve_config_file`, from anywhere)."""
    package = bundled_configs_dir()
    return [f"cloud_runtime/configs/{p.name}" for p in sorted(package.glob("configs/*.toml"))] if package else []


def resolve_config_file(given: str | None) -> str | None:
    """The run config ``--config`` names: a path from the current directory first, then one of the cloud
    package's bundled configs (``cloud_runtime/configs/X.toml`` from any directory, or ``X.toml``)."""
    if given is None:
        return None
    path = Path(given).expanduser()
    if path.is_file():
        return str(path)
    package = bundled_configs_dir()
    if package is not None and not path.is_absolute():
        parts = path.parts[1:] if path.parts and path.parts[0] in CLOUD_PACKAGE_NAMES else path.parts
        for candidate in (package.joinpath(*parts), package / "configs" / path.name):
            if parts and candidate.is_file():
                return str(candidate)
    bundled = bundled_config_names()
    where = f"; the bundled ones: {', '.join(bundled)}" if bundled else ""
    raise ConfigError(f"--config {given}: no such file (from {Path.cwd()}) and no bundled run config of that "
                      f"name{where}")


def backend_plugin(name: str) -> Any:
    """The launch backend ``--backend NAME`` names (a ``workbench.backends`` plugin)."""
    from workbench.training.backends import backend

    return backend(name)


def render_plan(plan: Any) -> None:
    """The plan for people: cluster, memory fit, time and money, then every derivation."""
    from rich.table import Table
    from workbench_cloud.plan import fmt

    d = plan.to_dict()
    cluster = Table(title="cluster", box=None, show_edge=False, title_justify="left", show_header=False)
    cluster.add_column(style="bold")
    cluster.add_column()
    cluster.add_row("provider / GPU", f"{plan.provider} {plan.gpu}")
    cluster.add_row("nodes", f"{plan.nodes} × {plan.gpus_per_node} GPUs = {plan.total_gpus} GPUs")
    cluster.add_row("trainer", f"{fmt(d['trainer_nodes'])} nodes, {plan.trainer_gpus} GPUs, sharding {plan.sharding} "
                    + ("(FSDP2: weights, gradients, Adam state split over them)" if plan.sharding == "fsdp"
                       else "(DDP: a whole replica on each)"))
    cluster.add_row("inference", f"{fmt(d['inference_nodes'])} nodes, {plan.inference_gpus} GPUs "
                    f"({plan.inference_replicas} replicas × {plan.inference_tp} GPUs)")
    cluster.add_row("mode", f"{plan.mode}, {plan.rollouts_per_step} rollouts/step, "
                    f"{fmt(plan.tokens_per_step)} tokens/step, {plan.max_steps:,} steps")
    console.print(cluster)
    console.print()

    mem = Table(title="memory per GPU (GB)", box=None, show_edge=False, title_justify="left")
    for col in ("", "trainer", "inference"):
        mem.add_column(col, justify="right" if col else "left")
    tr, inf = plan.memory["trainer"], plan.memory["inference"]
    rows = [("weights", tr["weights_gb"], inf["weights_gb"]), ("gradients", tr["grads_gb"], None),
            ("optimizer (Adam m+v)", tr["optimizer_gb"], None),
            ("gathered layers (FSDP)", tr["gathered_layers_gb"], None),
            ("activations (checkpointed)", tr["activations_gb"], None),
            ("KV cache, batch at mean length", None, inf["kv_batch_gb"]),
            ("KV cache, one full-context sequence", None, inf["kv_full_context_gb"]),
            ("total", tr["total_gb"], inf["total_gb"]), ("usable", tr["usable_gb"], inf["usable_gb"])]
    for name, a, b in rows:
        mem.add_row(name, "" if a is None else f"{a:.1f}", "" if b is None else f"{b:.1f}")
    verdict = lambda ok: "[green]fits[/]" if ok else "[red]does not fit[/]"  # noqa: E731
    mem.add_row("verdict", verdict(tr["fits"]), verdict(inf["fits"]))
    console.print(mem)
    if inf.get("batch_limited_by_memory"):
        console.print("[yellow]note:[/] the inference batch is limited by KV-cache memory; requests will queue")
    console.print()

    cost = Table(title="time and cost", box=None, show_edge=False, title_justify="left", show_header=False)
    cost.add_column(style="bold")
    cost.add_column(justify="right")
    cost.add_row("trainer time / step", f"{plan.trainer_time_s:,.1f} s")
    cost.add_row("inference time / step", f"{plan.inference_time_s:,.1f} s ({plan.inference_bound}-bound decode)")
    cost.add_row("weight sync / step", f"{plan.weight_sync_s:,.1f} s")
    cost.add_row("step time", f"{plan.step_time_s:,.1f} s ({plan.step_time_s / 60:.2f} min, {plan.mode})")
    cost.add_row("price", f"${plan.usd_per_gpu_s:g}/GPU-s (${plan.usd_per_gpu_s * 3600:.2f}/GPU-h)")
    cost.add_row("$ / step", f"${plan.usd_per_step:,.2f}")
    cost.add_row("wall time", f"{plan.wall_s / 3600:,.1f} h ({plan.wall_days:.2f} days)")
    cost.add_row("total", f"${plan.total_usd:,.0f}")
    if plan.budget_usd is not None:
        ok = plan.total_usd <= plan.budget_usd
        cost.add_row("budget", f"${plan.budget_usd:,.0f} " + ("[green]within[/]" if ok else "[red]exceeded[/]"))
    console.print(cost)
    console.print()
    console.print("[bold]how each number was computed[/]")
    for i, row in enumerate(plan.derivation, 1):
        console.print(f"{i:>3}. {row.line()}", markup=False, highlight=False)
    console.print()
    console.print("[bold]assumptions[/]")
    for a in plan.assumptions:
        console.print(f"  - {a}", markup=False, highlight=False)


def _launch(ctx: click.Context, run: Any, backend: str | None, budget: float | None, db: str | None,
            threads: int | None, as_json: bool, plan: Any = None, address: str | None = None) -> None:
    """Run the launch pipeline on ``backend`` and follow the run's stream into the store. ``run`` is a
    RunConfig for the local backend, the LaunchConfig (with its ``plan``) for Modal."""
    from workbench.cli.common import open_store
    from workbench.cli.train_cmd import step_line

    if backend is None:
        raise ConfigError("say where to run: --backend local (the whole pipeline on this machine), or --plan to see "
                          "the cloud plan and cost")
    store = open_store(ctx, db)

    def on_event(ev: dict[str, Any]) -> None:
        if ev["kind"] == "train":  # the run's step, eval and event records
            row = ev["row"]
            rec = {"kind": row["kind"], "step": row["step"], "metrics": json.loads(row["metrics"]),
                   "message": row["message"]}
            console_err.print(step_line(rec), highlight=False, markup=False)

    from workbench.cost.budgets import run_cap

    cap, why = run_cap(store.conn, budget)  # the run's own budget or what is left of the month

    def on_start(rid: str) -> None:
        console_err.print(f"launched run {rid} (backend {backend}, {why}); `workbench stop {rid}` stops it",
                          markup=False)

    chosen = backend_plugin(backend)
    if chosen.notice:
        console_err.print(f"workbench: {chosen.notice}", markup=False)
    where = {"address": address} if address else {}  # a backend that takes one (takes_address)
    out = chosen.launch(store, run, plan, budget_usd=cap, threads=threads, on_event=on_event, on_start=on_start,
                        **where)
    summary = {"run_id": out.run_id, "status": out.status, "bundle_hash": out.bundle_hash,
               "spent_usd": round(out.spent_usd, 6), **{k: v for k, v in out.summary.items() if k != "run_id"}}
    if as_json:
        emit_json(summary)
    else:
        console.print(f"run {out.run_id}: {out.status}, {summary.get('steps', 0)} steps, spent ${out.spent_usd:.4f}",
                      markup=False)


@click.command("launch", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("env", required=False)
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="A run config (TOML): the `workbench train` tables plus [cloud].")
@click.option("--plan", "plan_only", is_flag=True, help="Print the cluster plan and cost; launch nothing.")
@click.option("--backend", default=None, metavar="NAME",
              help="Where to run: a launch backend (bundled: local, modal, ray; more as plugins).")
@click.option("--address", default=None, metavar="HOST:PORT",
              help="The cluster of a backend that takes one: --backend ray's Ray head (HOST:PORT, or ray://HOST:10001); "
                   "else RAY_ADDRESS, else a one-node cluster started here for the run.")
@click.option("--budget", type=float, default=None, metavar="USD",
              help="Refuse a plan whose estimated total exceeds USD (else cloud.budget_usd).")
@click.option("--max-steps", type=int, default=None, help="Optimizer steps (loop.max_steps).")
@click.option("--threads", type=int, default=None, help="torch CPU threads per process (--backend local).")
@click.option("--nodes", type=int, default=None, metavar="N",
              help="Trainer nodes, each of trainer.ranks processes (torchrun): trainer.nodes, all on this machine for "
                   "--backend local; cloud.trainer_nodes for a planned cluster.")
@db_option
@json_option("Print the plan (or the run's summary) as one JSON object.")
@click.pass_context
def launch_command(ctx: click.Context, env: str | None, config_file: str | None, plan_only: bool,
                   backend: str | None, address: str | None, budget: float | None, max_steps: int | None,
                   threads: int | None, nodes: int | None, db: str | None, as_json: bool) -> None:
    """Plan an RL run on ENV for a GPU cluster. Config keys can be set with dotted flags:
    --cloud.nodes 4, --cloud.mfu 0.35, --loop.max_steps 100."""
    from workbench.cli.common import open_store
    from workbench.training.run_config import parse_overrides
    from workbench.usecases.launch import check_trainer_nodes, plan_trainer_nodes, preflight

    overrides = parse_overrides(ctx.args)
    config_file = resolve_config_file(config_file)
    if max_steps is not None:
        if max_steps < 1:
            raise ConfigError("--max-steps must be a positive integer")
        overrides["loop.max_steps"] = max_steps
    if budget is not None and budget < 0:
        raise ConfigError("--budget cannot be negative")
    chosen = backend_plugin(backend) if backend else None
    if address is not None and not getattr(chosen, "takes_address", False):
        raise ConfigError(f"--address names the cluster of a backend that takes one (ray); backend {backend!r} does not")
    runs_config = chosen is not None and chosen.takes == "run" and not plan_only
    if nodes is not None:
        if nodes < 1:
            raise ConfigError(f"--nodes must be at least 1, not {nodes}")
        overrides["trainer.nodes" if runs_config else "cloud.trainer_nodes"] = nodes
    if runs_config:
        # The local backend runs on this machine's CPU: the [cloud] table, the GPU plan's cost and
        # memory fit do not apply; the budget is enforced on the run's own cost ledger instead.
        from workbench.training.run_config import load_tables, validate_tables

        run = validate_tables(load_tables(config_file, overrides, env))
        check_trainer_nodes(chosen, int(run.trainer.get("nodes", 1)))
        _launch(ctx, run, backend, budget, db, threads, as_json, address=address)
        return
    live = address or (os.environ.get("RAY_ADDRESS") if getattr(chosen, "takes_address", False) else None)
    if plan_only and live and chosen is not None and hasattr(chosen, "plan_shape"):
        for key, value in chosen.plan_shape(live).items():  # the live cluster's shape; flags still win
            overrides.setdefault(key, value)
    planner = backend if chosen is not None and chosen.takes == "launch" else None  # None: the cluster plan
    with open_store(ctx, db, read_only_ok=plan_only) as store:
        try:
            checked = preflight(store.conn, planner, env=env, config_file=config_file, max_steps=max_steps,
                                budget_usd=budget, overrides=overrides)
        except ConfigError as e:
            missing = getattr(e, "missing_cloud_keys", None)
            if not missing:
                raise
            example = " ".join(f"--{k} N" for k in missing[:2])
            raise ConfigError(f"{e}: pass --config FILE with a [cloud] table (bundled: "
                              f"{', '.join(bundled_config_names()) or 'none'}) or set each key as a flag "
                              f"({example}{' ...' if len(missing) > 2 else ''})") from None
    plan = checked.plan
    if plan_only:
        if as_json:
            emit_json(plan.to_dict())
        else:
            render_plan(plan)
    if checked.budget_problem is not None:
        raise checked.budget_error or ConfigError(checked.budget_problem)
    if plan_only:
        return
    checked.raise_if_refused()  # the memory fit
    if chosen is not None:
        check_trainer_nodes(chosen, plan_trainer_nodes(plan))
    cfg = checked.launch_config
    _launch(ctx, cfg if chosen is not None and chosen.takes == "launch" else cfg.run, backend, budget, db, threads,
            as_json, plan, address=address)


@click.command("stop")
@click.argument("run")
@db_option
@click.pass_context
def stop_command(ctx: click.Context, run: str, db: str | None) -> None:
    """Stop a launched run: it stops within one step and records its final cost."""
    from workbench_cloud.launch import stop_run

    from workbench.cli.common import open_store

    with open_store(ctx, db) as store:
        rid = stop_run(store, run)
    console.print(f"asked run {rid} to stop; `workbench runs {rid} --follow` shows it finish", markup=False)


COMMANDS = [launch_command, stop_command]
