"""``workbench train``: the async RL loop (inference server, orchestrator, trainer) on this machine."""

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
    open_store,
    run_async,
)
from workbench.format import fnum

#: Where every field of the step line (and every other number Workbench prints) is explained.
GLOSSARY = "docs/glossary.md"


def off_policy_text(metrics: dict[str, Any]) -> str:
    """The staleness histogram (``staleness_K``: rollouts sampled K policy versions before this step)
    as words: ``0 steps: 8, 1 step: 128``."""
    hist = sorted((int(k.removeprefix("staleness_")), int(v)) for k, v in metrics.items()
                  if k.startswith("staleness_") and k.removeprefix("staleness_").isdigit())
    return ", ".join(f"{age} step{'' if age == 1 else 's'}: {n}" for age, n in hist) or "-"


def step_line(rec: dict[str, Any]) -> str:
    """One line per training record, for the terminal; ``docs/glossary.md`` explains every field."""
    m = rec["metrics"]
    if rec["kind"] == "step":
        return (f"step {rec['step']:>4}  reward {fnum(m.get('reward_mean'))} (sd {fnum(m.get('reward_std'))})"
                f"  loss {fnum(m.get('loss'), 4)}  mismatch_kl {fnum(m.get('mismatch_kl'), 4)}"
                f"  masked {fnum(m.get('masked_fraction'))}  entropy {fnum(m.get('entropy'))}"
                f"  tok/s {m.get('tokens_per_s', 0):.0f}  dropped {int(m.get('dropped', 0))}"
                f"  off-policy {off_policy_text(m)}  wait {m.get('wait_s', 0):.1f}s train {m.get('train_s', 0):.1f}s"
                f" update {m.get('update_s', 0):.1f}s")
    if rec["kind"] == "eval":
        se = f"se {fnum(m['reward_stderr'])}, " if m.get("reward_stderr") is not None else ""
        rollouts = f"{int(m['rollouts'])} rollouts, " if m.get("rollouts") is not None else ""
        return (f"eval at step {rec['step']}: held-out reward {fnum(m.get('reward_mean'))} "
                f"({se}{rollouts}run {rec['message']})")
    return f"{rec['kind']} at step {rec['step']}: {rec['message']}"


@click.command("train", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("env", required=False)
@env_args_option()
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="A run config (TOML): [env] [loop] [algorithm] [loss] [trainer].")
@click.option("--max-steps", type=int, default=None, help="Optimizer steps (loop.max_steps).")
@click.option("--sync", is_flag=True, help="Generate, train, update, repeat: no overlap (loop.sync).")
@click.option("--dry-run", is_flag=True, help="Print the resolved config as TOML and exit.")
@click.option("--resume", default=None, metavar="RUN", help="Continue a training run from its last checkpoint.")
@click.option("--threads", type=int, default=None, help="torch CPU threads of the server and of the trainer.")
@click.option("--data", "data_runs", multiple=True, metavar="RUN",
              help="Train with SFT on this run's stored rollouts instead of sampling (repeatable; data.runs); "
                   "needs --algorithm.name sft.")
@click.option("--allow-other-env", is_flag=True, help="Let --data name runs of another environment than ENV "
              "(data.allow_other_env); the run says what it mixes.")
@db_option
@json_option("Print one JSON summary as the last line of stdout.")
@click.pass_context
def train_command(ctx: click.Context, env: str | None, env_args: str | None, config_file: str | None, max_steps: int | None, sync: bool,
                  dry_run: bool, resume: str | None, threads: int | None, data_runs: tuple[str, ...],
                  allow_other_env: bool, db: str | None, as_json: bool) -> None:
    """Train on ENV with RL. Any config key can be set with a dotted flag: --trainer.lr 1e-4,
    --loop.groups_per_step 4, --algorithm.name rloo. With --data RUN (and --algorithm.name sft) it
    trains on stored trajectories (played, imported or sampled) instead of sampling.

    Each optimizer step prints one line (reward and its sd, loss, mismatch_kl, masked, entropy, tok/s,
    dropped, off-policy, wait/train/update seconds); docs/glossary.md says what every field is."""
    from workbench.training.run_config import parse_overrides, resolve, to_toml

    overrides = parse_overrides(ctx.args)
    if env_args is not None:
        from workbench.authoring.discovery import parse_env_args

        overrides["env.args"] = parse_env_args(env_args)
    if max_steps is not None:
        overrides["loop.max_steps"] = max_steps
    if sync:
        overrides["loop.sync"] = True
    if data_runs:
        overrides["data.runs"] = list(data_runs)
    if allow_other_env:
        overrides["data.allow_other_env"] = True
    cfg = None
    if resume:
        extra = sorted(set(overrides) - {"loop.max_steps"})
        if env or config_file or extra or dry_run:
            raise click.UsageError("a resumed run keeps its own config; only --max-steps may change "
                                   f"(got {', '.join(extra) or env or config_file or '--dry-run'})")
    else:
        cfg = resolve(config_file, overrides, env)
    if dry_run:
        assert cfg is not None
        from workbench.training.run_config import env_config_file

        shipped = env_config_file(cfg.env)
        if shipped is not None:
            click.echo(f"# includes the run config shipped with {cfg.env}: {shipped}")
        click.echo(to_toml(cfg.raw), nl=False)
        return
    store = open_store(ctx, db)
    from workbench.training.loop import train

    def on_start(run_id: str, rdir: Any) -> None:
        console_err.print(f"training run [cyan]{run_id}[/] (files in {rdir}); `workbench runs {run_id}` shows it; "
                          f"the step line's fields are explained in {GLOSSARY}")

    def on_record(rec: dict[str, Any]) -> None:
        console_err.print(step_line(rec), highlight=False)

    out = run_async(train(cfg, store, resume=resume, max_steps=max_steps, threads=threads, on_start=on_start, on_record=on_record,
                          log=lambda m: console_err.print(f"workbench: {m}")))
    s = out.summary
    if as_json:
        emit_json(s)
    else:
        console.print(f"run [cyan]{s['run_id']}[/]: {s['steps']} steps, reward {fnum(s['reward_start'])} → "
                      f"{fnum(s['reward_end'])} (mean of the first and last {s['reward_window']} steps), held-out reward "
                      f"{fnum(s['eval_first'])} → {fnum(s['eval_last'])}, {s['dropped']} stale rollouts dropped, "
                      f"{s.get('wall_s', 0):.0f}s in all")


COMMANDS = [train_command]
