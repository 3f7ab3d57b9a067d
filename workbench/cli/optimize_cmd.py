"""``workbench optimize``: improve an environment's system prompt with GEPA (workbench/runs/optimize.py)."""

from __future__ import annotations

from typing import Any

import click

from workbench.cli.common import (
    console,
    console_err,
    db_option,
    emit_json,
    env_args_option,
    json_option,
    no_credentials,
    open_store,
    run_async,
)
from workbench.format import fnum


@click.command("optimize")
@click.argument("env", required=False)
@click.option("-m", "--model", default=None, help="The model whose prompt is optimised: a registered model "
              "(`workbench models`), or a model id with --base-url (default: the embedded model).")
@click.option("--base-url", default=None, callback=no_credentials, help="The task model's OpenAI-compatible endpoint.")
@click.option("--reflection-model", "reflection_model", default=None,
              help="The model that reads the rollouts and proposes new prompts (a registered model, or an id "
                   "with --reflection-base-url).")
@click.option("--reflection-base-url", default=None, callback=no_credentials, help="The reflection model's OpenAI-compatible endpoint.")
@click.option("--budget", "budget_usd", type=float, default=None,
              help="Stop when the spend (task and reflection tokens) would leave too little for the held-out "
                   "evaluation, in USD.")
@click.option("--max-evals", type=int, default=None,
              help="Rollouts the search may run on the training split (default: 10 per training task).")
@env_args_option()
@click.option("-n", "--num-tasks", "n", type=int, default=None, help="Training tasks: the first N not held out.")
@click.option("--heldout", type=int, default=None, help="Hold out the last N tasks for the before/after "
              "report (default: a fifth of them).")
@click.option("-r", "--rollouts-per-task", "rollouts_per_task", type=int, default=1, show_default=True,
              help="Rollouts per held-out task.")
@click.option("-c", "--concurrency", type=int, default=32, show_default=True)
@click.option("--minibatch", type=int, default=3, show_default=True, help="Tasks reflected on per proposal.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--apply", is_flag=True, help="Keep the best prompt as an override of ENV that eval, train and "
              "package load (the environment's source is never edited).")
@click.option("--unapply", is_flag=True, help="Remove ENV's override and exit.")
@click.option("--resume", default=None, metavar="ID", help="Continue the optimisation ID that did not finish "
              "(killed or interrupted) with its own options: GEPA from its saved state, the held-out run kept.")
@db_option
@json_option()
@click.pass_context
def optimize_command(ctx: click.Context, env: str, model: str | None, base_url: str | None,
                     reflection_model: str | None, reflection_base_url: str | None, budget_usd: float | None,
                     max_evals: int | None, env_args: str | None, n: int | None, heldout: int | None,
                     rollouts_per_task: int, concurrency: int, minibatch: int, seed: int, apply: bool, unapply: bool,
                     resume: str | None, db: str | None, as_json: bool) -> None:
    """Improve ENV's system prompt with GEPA: reflective evolution with a Pareto front, the env's rubric
    the metric on the training split, and the seed and best prompts evaluated on the held-out split.
    Every evaluation is a run (browse them with `workbench runs`); the optimisation is a run of kind
    optimize, and `workbench compare ID` shows held-out before against after."""
    from workbench.authoring import discovery, overrides
    from workbench.authoring.discovery import parse_env_args
    from workbench.errors import ConfigError
    from workbench.runs.optimize import OptimizeOptions, optimize

    if resume:
        from click.core import ParameterSource

        extra = [f"--{k.replace('_', '-')}" for k in ctx.params if k not in ("resume", "db", "as_json", "env")
                 and ctx.get_parameter_source(k) not in (ParameterSource.DEFAULT, None)]
        if env or extra:
            raise ConfigError("a resumed optimisation keeps its own options; pass only --resume ID (and --db, "
                                   f"--json); got {env or ', '.join(extra)}")
    elif not env:
        raise ConfigError("optimize needs an environment (e.g. `workbench optimize arithmetic`) or --resume ID")
    if unapply:
        assert env is not None
        name = discovery.resolve(env).name
        removed = overrides.remove(name)
        if as_json:
            emit_json({"env": name, "removed": removed})
        else:
            console.print(f"override of {name} removed" if removed else f"{name} has no override")
        return
    opts = None if resume else OptimizeOptions(env=env or "", model=model, reflection_model=reflection_model or "",
                           env_args=parse_env_args(env_args), base_url=base_url,
                           reflection_base_url=reflection_base_url, budget_usd=budget_usd, max_evals=max_evals, n=n,
                           heldout=heldout, rollouts_per_task=rollouts_per_task, concurrency=concurrency,
                           minibatch=minibatch, seed=seed, apply=apply)

    def log(line: str) -> None:
        if not as_json:
            console_err.print(line, highlight=False, markup=False)

    with open_store(ctx, db) as store:
        outcome = run_async(optimize(opts, store, log=log, resume=resume,
                                     on_start=lambda pid: log(f"optimisation {pid} " + (
                                         "resumed" if resume else "started"))))
    s = outcome.summary
    if as_json:
        emit_json(_json(s))
        return
    _print(s)


def _json(s: dict[str, Any]) -> dict[str, Any]:
    cmp = s.get("comparison") or {}
    return {"pipeline_id": s["pipeline_id"], "env": s["env"], "model": s["model"],
            "reflection_model": s["reflection_model"], "seed_prompt": s["seed_prompt"], "best_prompt": s.get("best_prompt"),
            "heldout_before": {**s["heldout_before"], "ci95": (cmp.get("before") or {}).get("mean_ci95")},
            "heldout_after": {**s["heldout_after"], "ci95": (cmp.get("after") or {}).get("mean_ci95")},
            "delta": cmp.get("delta"), "delta_ci95": cmp.get("ci95"), "significant": cmp.get("significant"),
            "candidates": s["candidates"], "evals": s["evals"], "cost_usd": s["cost_usd"],
            "reflection_cost_usd": s["reflection_cost_usd"], "stopped_by": s.get("stopped_by"),
            "applied": s.get("applied"), "status": s["status"],
            "seed_kept": s["heldout_before"]["run_id"] == s["heldout_after"]["run_id"]}


def _print(s: dict[str, Any]) -> None:
    from rich.table import Table

    cmp = s.get("comparison") or {}
    console.print(f"[bold]{s['env']}[/] on [bold]{s['model']}[/], reflection by {s['reflection_model']} — "
                  f"optimisation [cyan]{s['pipeline_id']}[/]", highlight=False)
    t = Table(box=None, show_edge=False, header_style="bold")
    for col in ("#", "parent", "train score", "rollouts", "prompt"):
        t.add_column(col, justify="left" if col == "prompt" else "right", overflow="fold")
    for c in sorted(s["candidates"], key=lambda c: -(c["score"] if c["score"] is not None else -1)):
        t.add_row(str(c["index"]), "-" if c["parent"] is None else str(c["parent"]), fnum(c["score"]),
                  str(c["rollouts"]), " ".join(c["prompt"].split())[:120] or "(none)")
    console.print(t)

    def ci(side: str) -> str:
        v = (cmp.get(side) or {}).get("mean_ci95")
        return f" (95% CI {v[0]:.3f}–{v[1]:.3f})" if v else ""

    console.print(f"held-out before {fnum(s['heldout_before']['mean_reward'])}{ci('before')}   after "
                  f"{fnum(s['heldout_after']['mean_reward'])}{ci('after')}", highlight=False)
    if cmp.get("ci95") and s["heldout_before"]["run_id"] != s["heldout_after"]["run_id"]:
        lo, hi = cmp["ci95"]
        verdict = "significant" if cmp.get("significant") else "not significant"
        console.print(f"paired Δ {cmp['delta']:+.3f}, 95% CI {lo:+.3f} to {hi:+.3f}: {verdict}", highlight=False)
    elif s["heldout_before"]["run_id"] == s["heldout_after"]["run_id"]:
        console.print("no candidate beat the seed prompt on the training split: the seed prompt stays",
                      highlight=False)
    console.print(f"{s['evals']} search rollouts, {s['reflection_calls']} reflection calls; cost ${s['cost_usd']:.4f} "
                  f"(reflection ${s['reflection_cost_usd']:.4f}); stopped by {s.get('stopped_by')}", highlight=False)
    console.print("best prompt:", highlight=False)
    console.print(s.get("best_prompt") or "(none)", highlight=False, markup=False)
    if s.get("applied"):
        console.print(f"applied: eval, train and package of {s['env']} now use it ({s['applied']}; "
                      f"`workbench optimize {s['env']} --unapply` removes it)", highlight=False)


COMMANDS = [optimize_command]
