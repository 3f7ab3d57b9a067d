"""``workbench distill``: a teacher's good rollouts train the student (workbench/training/distill.py)."""

from __future__ import annotations

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


@click.command("distill")
@click.argument("env")
@click.option("--teacher", required=True, metavar="MODEL",
              help="The teacher: a registered model (`workbench models`), a model id at --teacher-base-url, or "
                   "an embedded model.")
@click.option("--teacher-base-url", default=None, callback=no_credentials, metavar="URL",
              help="The teacher's OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1.")
@click.option("--student", required=True, metavar="MODEL",
              help="The student the local trainer fine-tunes: tiny, a model directory or a cached Hugging Face id.")
@click.option("--min-reward", type=float, default=1.0, show_default=True,
              help="A teacher rollout becomes training data when its reward reaches this.")
@click.option("--heldout", type=int, default=None, metavar="N",
              help="Hold out the last N tasks for the comparison (default: a fifth of the tasks, at least 1).")
@click.option("-n", "--num-tasks", "n", type=int, default=None, help="Only the first N tasks of the training split.")
@click.option("-r", "--rollouts", "rollouts_per_task", type=int, default=4, show_default=True,
              help="The teacher's rollouts per training task.")
@click.option("--steps", type=int, default=20, show_default=True, help="The student's optimizer steps.")
@click.option("--lr", type=float, default=None, help="The student's learning rate (default: the trainer's).")
@click.option("--method", type=click.Choice(["sft", "on-policy"]), default="sft", show_default=True,
              help="sft: fine-tune on the teacher's filtered rollouts; on-policy: the student samples and the "
                   "teacher scores each of its tokens (reverse KL; a teacher that shares the student's tokenizer "
                   "and serves prompt_logprobs, e.g. `workbench serve` or vLLM).")
@env_args_option()
@click.option("-c", "--concurrency", "c", type=int, default=32, show_default=True, help="Max concurrent rollouts.")
@click.option("--threads", type=int, default=None, help="torch CPU threads of the training run's server and trainer.")
@db_option
@json_option()
@click.pass_context
def distill_command(ctx: click.Context, env: str, teacher: str, teacher_base_url: str | None, student: str,
                    min_reward: float, heldout: int | None, n: int | None, rollouts_per_task: int, steps: int, lr: float | None,
                    method: str, env_args: str | None, c: int, threads: int | None, db: str | None,
                    as_json: bool) -> None:
    """Distill TEACHER into STUDENT on ENV: the teacher's rollouts on the training split that reach
    --min-reward become SFT data for the student; then the student before and after, and the teacher, are
    evaluated on the held-out tasks and compared. Every stage is a run (`workbench runs`)."""
    from workbench.authoring.discovery import parse_env_args
    from workbench.cli.compare_cmd import print_comparison
    from workbench.training.distill import DistillOptions, distill

    opts = DistillOptions(env=env, teacher=teacher, student=student, env_args=parse_env_args(env_args),
                          teacher_base_url=teacher_base_url, min_reward=min_reward, heldout=heldout, n=n,
                          rollouts_per_task=rollouts_per_task, steps=steps, lr=lr, method=method, concurrency=c, threads=threads)
    out_console = console_err if as_json else console  # --json: stdout holds the JSON line only

    def log(message: str) -> None:
        out_console.print(message, highlight=False, markup=False)

    store = open_store(ctx, db)
    try:
        outcome = run_async(distill(opts, store, log=log))
    finally:
        store.close()
    if as_json:
        emit_json(outcome.to_json())
        return
    console.print()
    print_comparison(outcome.comparison)
    data = f"teacher run {outcome.teacher_run} ({outcome.kept} of {outcome.teacher_rollouts} rollouts kept)" \
        if outcome.teacher_run else "on-policy (no teacher data)"
    console.print(f"pipeline [cyan]{outcome.pipeline_id}[/]: {data}, training run {outcome.train_run}", highlight=False)


COMMANDS = [distill_command]
