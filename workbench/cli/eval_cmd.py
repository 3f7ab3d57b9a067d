"""``workbench eval``: run an environment against a model and store every rollout."""

from __future__ import annotations

import time
from typing import Any

import click

from workbench.cli.common import (
    console,
    console_err,
    db_option,
    emit_json,
    env_args_option,
    json_option,
    model_options,
    open_store,
    run_async,
)
from workbench.format import esc, fnum, safe_text


def rate_text(s: Any, sampling_s: float | None = None, total_s: float | None = None) -> str:
    """What the rollout rate measures: rollouts finished per second while sampling (the model's start-up
    and the preflight left out), with the seconds of each when this command measured them."""
    text = f"{s.get('rollouts_per_s', 0):.1f} rollouts/s while sampling"
    if sampling_s is not None:
        text += f" ({sampling_s:.1f}s)"
    if total_s is not None:
        text += f"; {total_s:.1f}s in all, model start-up included"
    return text


def print_summary(s: Any, sampling_s: float | None = None, total_s: float | None = None) -> None:
    """An :class:`~workbench.usecases.evaluation.EvalSummary` for people; ``sampling_s`` and ``total_s``
    (seconds, when known) say what the rollout rate was measured over."""
    from rich.table import Table

    mean = s.get("mean_reward")
    se = s.get("stderr")
    head = f"[bold]{esc(s['env'])}[/] ({esc(s['env_version'])}) on [bold]{esc(s['model'])}[/] — run [cyan]{esc(s['run_id'])}[/]"
    console.print(head)
    line = f"mean reward {fnum(mean)}" + (f" (se {se:.3f})" if se is not None else "")
    line += f"   rollouts {s['rollouts']}   errors {s['errors']}"
    if s.get("pass_at_k"):
        line += "   " + "  ".join(f"{k} {v:.3f}" for k, v in s["pass_at_k"].items())
    console.print(line)
    if s.get("rewards") or s.get("metrics"):
        t = Table(show_edge=False, box=None, pad_edge=False)
        t.add_column("function")
        t.add_column("kind")
        t.add_column("mean", justify="right")
        for name, v in s.get("rewards", {}).items():
            t.add_row(safe_text(name), "reward", fnum(v))
        for name, v in s.get("metrics", {}).items():
            t.add_row(safe_text(name), "metric", fnum(v))
        console.print(t)
    if s.get("error_kinds"):
        console.print(safe_text("errors by kind: " + ", ".join(f"{k} {v}" for k, v in s["error_kinds"].items())))
    cost = f"${s['cost_usd']:.4f}" if not s.get("unpriced") else "unknown (no price for this model; `workbench prices set`)"
    console.print(f"tokens in {s['prompt_tokens']} out {s['completion_tokens']}   cost {cost}   "
                  f"{rate_text(s, sampling_s, total_s)}")


@click.command("eval")
@click.argument("env", required=False)
@env_args_option()
@click.option("-n", "--num-tasks", "n", type=int, default=None, help="Number of tasks (the first n).")
@click.option("-r", "--rollouts", "rollouts_per_task", type=int, default=1, show_default=True,
              help="Rollouts per task (one group).")
@click.option("-c", "--concurrency", "c", type=int, default=32, show_default=True, help="Max concurrent rollouts.")
@model_options(several=True)
@click.option("--timeout", "timeout_s", type=float, default=600.0, show_default=True,
              help="Per-rollout timeout in seconds.")
@click.option("--max-retries", type=int, default=4, show_default=True, help="Retries on 429/5xx/connection errors.")
@click.option("-t", "--temperature", type=float, default=None, help="Override the environment's temperature.")
@click.option("--max-tokens", type=int, default=None, help="Override the environment's max_tokens.")
@click.option("--stall-timeout", "stall_timeout_s", type=float, default=60.0, show_default=True,
              help="A model response that sends nothing for this many seconds is a timeout.")
@click.option("--max-response-mb", type=float, default=16.0, show_default=True,
              help="A larger model response is a bad_response (its body is not kept).")
@click.option("--pass-threshold", type=float, default=1.0, show_default=True,
              help="A rollout passes (for pass@k) when its total reward reaches this.")
@click.option("--render-prompts", is_flag=True,
              help="Let the server re-render each follow-up prompt from messages instead of continuing the "
                   "sampled tokens exactly (shows the template's own drift as token_mismatch).")
@click.option("--resume", default=None, metavar="RUN", help="Finish a partial run (same settings, no duplicates).")
@db_option
@json_option("Print one JSON summary as the last line of stdout.")
@click.pass_context
def eval_command(ctx: click.Context, env: str | None, env_args: str | None, n: int | None, rollouts_per_task: int, c: int,
                 model: tuple[str, ...], base_url: str | None, api_key: str | None, harness: str | None,
                 runtime: str | None, timeout_s: float, max_retries: int, temperature: float | None,
                 max_tokens: int | None, stall_timeout_s: float, max_response_mb: float, pass_threshold: float,
                 render_prompts: bool, resume: str | None,
                 db: str | None, as_json: bool) -> None:
    """Evaluate ENV (a bundled name, a .py file, a package directory or a module)."""
    from workbench.authoring.discovery import parse_env_args
    from workbench.errors import ConfigError
    from workbench.runs.evaluate import EvalOptions
    from workbench.usecases.evaluation import run_eval

    started = time.perf_counter()
    if not env and not resume:
        raise ConfigError("eval needs an environment (e.g. `workbench eval arithmetic`) or --resume RUN")
    opts = EvalOptions(env=env or "", env_args=parse_env_args(env_args), n=n, rollouts_per_task=rollouts_per_task, concurrency=c,
                       model=model[0] if len(model) == 1 else None, base_url=base_url, api_key=api_key, timeout_s=timeout_s, max_retries=max_retries,
                       harness=harness, runtime=runtime, temperature=temperature, max_tokens=max_tokens,
                       pass_threshold=pass_threshold, render_prompts=render_prompts, resume=resume,
                       stall_timeout_s=stall_timeout_s, max_response_mb=max_response_mb)
    if len(model) > 1:
        return _eval_models(ctx, opts, list(model), db, as_json)
    store = open_store(ctx, db)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("mean reward {task.fields[reward]}  errors {task.fields[errors]}"),
                        TextColumn("{task.fields[oldest]}"),
                        TimeElapsedColumn(), console=console_err, transient=True,
                        disable=not console_err.is_terminal)
    bar: dict[str, Any] = {}

    def on_status(what: str, done: int | None, total: int | None) -> None:
        """Before the rollouts: the embedded model being built (first use) or started."""
        if "wait" not in bar:
            bar["wait"] = progress.add_task(what, total=total, reward="-", errors=0, oldest="")
        progress.update(bar["wait"], description=what, completed=done or 0, total=total)

    def on_start(run_id: str, total: int) -> None:
        if "wait" in bar:
            progress.remove_task(bar.pop("wait"))
        bar["id"] = progress.add_task(f"eval {run_id}", total=total, reward="-", errors=0, oldest="")

    def on_counters(cnt: Any) -> None:
        if "id" in bar:
            mean = f"{cnt.reward_sum / cnt.scored:.3f}" if cnt.scored else "-"
            age = cnt.oldest_in_flight_s
            oldest = f"oldest in flight {age:.0f}s" if age >= 5 else ""  # a stalled call shows its age
            progress.update(bar["id"], completed=cnt.finished, reward=mean, errors=cnt.errors, oldest=oldest)

    try:
        with progress:
            result = run_async(run_eval(opts, store, on_start=on_start, counters_cb=on_counters, on_status=on_status))
    finally:
        store.close()
    s = result.summary
    if as_json:
        emit_json(s)
    else:
        print_summary(s, sampling_s=result.outcome.wall_s, total_s=time.perf_counter() - started)
    if result.interrupted:
        console_err.print(f"interrupted: {s['rollouts']} rollouts kept; finish with `workbench eval --resume {s['run_id']}`")
        ctx.exit(130)
    failure = result.failure(f"`workbench show {s['run_id']}` has the details")
    if failure is not None:
        raise failure


def _eval_models(ctx: click.Context, opts: Any, models: list[str], db: str | None, as_json: bool) -> None:
    """``eval -m A -m B ...``: one run per model, concurrently, grouped as a comparison."""
    from workbench.runs.multi_eval import evaluate_models

    store = open_store(ctx, db)  # checks the store opens (and is writable) before anything runs
    path = store.path
    store.close()
    import contextlib

    with console_err.status(f"evaluating {len(models)} models", spinner="dots") if console_err.is_terminal else \
            contextlib.nullcontext():
        comparison = run_async(evaluate_models(opts, models, path))
    s = comparison.summary()
    if as_json:
        emit_json(s)
        return
    from rich.table import Table

    t = Table(box=None, show_edge=False, title=f"comparison {s['comparison_id']}: {s['env']} ({s['env_version']})")
    for col in ("model", "run", "mean reward", "se", "pass@1", "errors", "cost", "rollouts/s"):
        t.add_column(col, justify="left" if col in ("model", "run") else "right")
    for r in s["runs"]:
        t.add_row(r["name"], r["run_id"], fnum(r["mean_reward"]), fnum(r["stderr"]),
                  fnum((r["pass_at_k"] or {}).get("pass@1")), str(r["errors"]),
                  "unpriced" if r.get("unpriced") else f"${r['cost_usd']:.4f}", f"{r['rollouts_per_s']:.1f}")
    console.print(t)
    console.print("se: the standard error of the mean reward; rollouts/s: rollouts finished per second while "
                  "sampling; docs/glossary.md explains every column", markup=False, highlight=False)


COMMANDS = [eval_command]
