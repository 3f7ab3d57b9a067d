"""``workbench runs``, ``show`` and ``export``: read what the store holds."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import orjson

from workbench.cli.common import console, db_option, emit_json, json_option, open_store
from workbench.format import cut, esc, fnum, safe_text


def kind_option(help_text: str) -> Any:
    """``--kind KIND``: repeatable and comma-separated, ``all`` for every kind."""
    from workbench.runs.kinds import ALL, RUN_KINDS

    return click.option("--kind", "kinds", multiple=True, metavar="KIND",
                        help=f"{help_text} ({', '.join([*RUN_KINDS, ALL])}; repeatable or comma-separated; default: "
                             "eval, train, import, optimize, distill).")


@click.command("runs")
@click.argument("run", required=False)
@click.option("--env", default=None, help="Only runs of this environment.")
@kind_option("Only runs of these kinds")
@click.option("--limit", type=int, default=30, show_default=True)
@db_option
@json_option()
@click.option("--follow", is_flag=True, help="With RUN (a launched run): stream it into the store until it ends.")
@click.pass_context
def runs_command(ctx: click.Context, run: str | None, env: str | None, kinds: tuple[str, ...], limit: int,
                 db: str | None, as_json: bool, follow: bool) -> None:
    """List runs, newest first (your own: evals, training, imports, optimize and distill; --kind for others;
    a probe's policies are one entry); with RUN, that run (a training run: its steps, evals and events; a
    probe: its policies)."""
    from workbench.usecases.runs import kinds_of, list_runs, open_pipeline

    wanted = kinds_of(kinds)
    if follow and not run:
        raise click.UsageError("--follow needs a RUN")
    if run:
        with open_store(ctx, db, read_only_ok=True, existing=True) as store:
            pipeline = None if follow else open_pipeline(store.conn, run)
            if pipeline is not None:
                show_pipeline(pipeline, as_json)
                return
            if follow:
                from workbench_cloud.launch import follow_run

                from workbench.cli.train_cmd import step_line

                def on_event(ev: dict[str, Any]) -> None:
                    row = ev["row"]
                    if ev["kind"] == "train" and row["run_id"] == run:
                        console.print(step_line({**row, "metrics": orjson.loads(row["metrics"])}), markup=False)

                follow_run(store, run, on_event=on_event)
            show_run(store, run, as_json)
        return
    with open_store(ctx, db, read_only_ok=True, existing=True) as store:
        runs = list_runs(store.conn, limit=limit, env=env, kinds=wanted)
    if as_json:
        emit_json({"runs": runs, "kinds": list(wanted)})
        return
    if not runs:
        with open_store(ctx, db, read_only_ok=True, existing=True) as store:
            others = list_runs(store.conn, limit=1, env=env, kinds=None)
        if others:
            console.print(safe_text(f"no runs of kind {', '.join(wanted)} (`--kind all` lists every run)"))
        else:
            console.print("no runs yet: try `workbench eval arithmetic`")
        return
    from workbench.cli.run_tables import print_runs

    print_runs(runs)


def show_pipeline(entry: dict[str, Any], as_json: bool) -> None:
    """A probe (or validate) entry: its policies, each a run with its mean reward."""
    if as_json:
        emit_json({"pipeline": entry})
        return
    from workbench.cli.run_tables import print_pipeline

    print_pipeline(entry)


def show_run(store: Any, run_id: str, as_json: bool) -> None:
    from workbench.analysis.report import STEP_COLUMNS

    run = store.get_run(run_id)
    steps = store.train_records(run["id"], "step")
    other = [r for r in store.train_records(run["id"]) if r["kind"] != "step"]
    if as_json:
        emit_json({"run": run, "steps": steps, "records": other})
        return
    console.print(f"[bold]{esc(run['kind'])} run {esc(run['id'])}[/]  env {esc(run['env_name'])}  model "
                  f"{esc(run['model'])}  status {esc(run['status'])}" + (f"  [red]{esc(run['error'])}[/]" if run["error"] else ""))
    summary = run["summary"]
    if summary:
        from workbench.cli.run_tables import fvalue

        console.print(safe_text("  ".join(f"{k} {fvalue(v)}" for k, v in summary.items())))
    if run["kind"] != "train":
        return
    from rich.table import Table

    t = Table(box=None, show_edge=False)
    t.add_column("step", justify="right")
    for title, _, _ in STEP_COLUMNS:
        t.add_column(title, justify="right")
    for rec in steps:
        m = rec["metrics"]
        t.add_row(str(rec["step"]), *(fnum(m.get(key), digits) for _, key, digits in STEP_COLUMNS))
    console.print(t)
    for rec in other:
        m = rec["metrics"]
        detail = f"held-out reward {fnum(m.get('reward_mean'))} ({rec['message']})" if rec["kind"] == "eval" \
            else rec["message"]
        console.print(safe_text(f"{rec['kind']:>8} at step {rec['step']}: {detail}"))


def print_transcript(r: dict[str, Any], full: bool = False) -> None:
    """A rollout for a terminal. Everything from the rollout is shown as text (no markup, control characters
    visible); a long message is cut with its size said, unless ``full``."""
    from rich.panel import Panel
    from rich.text import Text

    from workbench.config.redact import redact
    from workbench.records.rollout import content_text

    clip = (lambda text: text) if full else cut
    status = Text("ok", style="green") if r["status"] == "ok" else safe_text(r["error_kind"], "red")
    console.print(Text.assemble(("rollout ", "bold"), safe_text(r["id"], "bold"), "  run ", safe_text(r["run_id"]),
                                "  env ", safe_text(r["env_name"]), "  model ", safe_text(r["model"]),
                                f"  task {r['task_index']} sample {r['sample_index']}  ", status))
    console.print(f"reward {fnum(r['reward'])}   turns {r['turns']}   {r['duration_s']:.2f}s   "
                  f"tokens in {r['prompt_tokens']} out {r['completion_tokens']}   cost ${r['cost_usd']:.5f}")
    colors = {"system": "magenta", "user": "blue", "assistant": "green", "tool": "yellow"}
    for m in r["messages"]:
        role = str(m.get("role", "?"))
        body = clip(content_text(m.get("content")))
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") or {}
            body += clip(f"\n→ {fn.get('name')}({fn.get('arguments')})")
        title = role + (f" ({m.get('name')})" if m.get("name") else "")
        console.print(Panel(safe_text(body) if body else Text("(empty)", style="dim"), title=safe_text(title),
                            title_align="left", border_style=colors.get(role, "white"), expand=True), soft_wrap=False)
    answer = r["answer"]
    shown = orjson.dumps(answer, default=str, option=orjson.OPT_NON_STR_KEYS).decode()  # JSON, never a Python repr
    console.print(Text.assemble("answer: ", safe_text(clip(shown))))
    for name, v in (r.get("rewards") or {}).items():
        console.print(Text.assemble("  reward ", safe_text(name), f" = {v:.3f}"))
    for name, v in (r.get("metrics") or {}).items():
        console.print(Text.assemble("  metric ", safe_text(name), f" = {v:.3f}"))
    for e in r.get("errors") or []:
        console.print(Text.assemble("  ", safe_text(e["kind"], "red"), " in ", safe_text(redact(str(e["source"]))),
                                    ": ", safe_text(clip(redact(str(e["message"]))))))
    for f in r.get("feedback") or []:
        whom = "this answer" if f["response_id"] else f"session {f['session']}"
        score = "" if f["score"] is None else f" score {f['score']:g}"
        console.print(Text.assemble("  feedback on ", safe_text(whom), score,
                                    *((" ", safe_text(f["label"], "bold")) if f["label"] else ()),
                                    *((": ", safe_text(clip(f["comment"]))) if f["comment"] else ())))
    from workbench.analysis.mcp_calls import mcp_calls_table

    mcp = mcp_calls_table(r.get("state"))
    if mcp is not None:
        console.print("[bold]MCP tool calls[/]")
        console.print(mcp)


def print_tokens(store: Any, rollout: dict[str, Any], tokenizer_name: str | None) -> dict[str, Any]:
    """The rollout's token report (the app's token view, as text): every token coloured by logprob, the
    mismatches from recording and re-rendering marked."""
    from workbench.analysis.token_render import legend, render_report
    from workbench.analysis.token_report import stored_report
    from workbench.errors import NotFoundError

    report = stored_report(store, rollout, tokenizer_name)
    if report is None:
        raise NotFoundError(f"rollout {rollout['id']} has no token trace: its server did not return token ids "
                            "(the embedded server and vLLM do)")
    console.print(legend())
    console.print(render_report(report))
    return report.to_dict()


@click.command("show")
@click.argument("target", required=False)
@click.option("--tokens", is_flag=True, help="Show the rollout's tokens with their logprobs and any mismatch.")
@click.option("--tokenizer", default=None, help="Model path or id whose tokenizer decodes and re-renders tokens.")
@click.option("--full", is_flag=True, help="Print long messages in full (else each is cut at 10,000 characters "
              "or 400 lines, with the size left out said).")
@click.option("--sort", "order", type=click.Choice(["newest", "oldest", "worst", "best"]), default="newest",
              show_default=True, help="A run's rollouts in this order (worst: failed, then lowest reward, first).")
@click.option("--limit", type=int, default=20, show_default=True, help="A run's rollouts shown per page.")
@click.option("--offset", type=int, default=0, show_default=True, help="A run's rollouts skipped before the page.")
@click.option("--page", type=int, default=None, help="The page of a run's rollouts (from 1; --limit a page).")
@kind_option("Without TARGET: list the runs of these kinds")
@db_option
@json_option()
@click.pass_context
def show_command(ctx: click.Context, target: str | None, tokens: bool, tokenizer: str | None, full: bool, order: str,
                 limit: int, offset: int, page: int | None, kinds: tuple[str, ...], db: str | None,
                 as_json: bool) -> None:
    """Show a run's summary and its rollouts (paged; ids to `show ROLLOUT`), a probe's policies, or a rollout
    as a readable transcript (--tokens: its token trace); without TARGET, list the runs (as `runs`)."""
    from workbench.errors import NotFoundError, OptionError
    from workbench.store.queries import get_rollout
    from workbench.usecases.runs import kinds_of, open_pipeline

    kinds_of(kinds)  # an unknown --kind ends here, before the store is opened
    if page is not None:
        if page < 1:
            raise OptionError("show.page", page, "1 or more")
        offset = (page - 1) * limit
    if target is None:
        ctx.invoke(runs_command, run=None, env=None, kinds=kinds, limit=30, db=db, as_json=as_json, follow=False)
        return
    with open_store(ctx, db, read_only_ok=True, existing=True) as store:
        run = None
        if "." not in target:
            pipeline = open_pipeline(store.conn, target)
            if pipeline is not None:
                show_pipeline(pipeline, as_json)
                return
            try:
                run = store.get_run(target)
            except NotFoundError:
                run = None
        if run is not None:
            from workbench.analysis.report import run_summary
            from workbench.usecases.runs import run_rollouts

            summary = run_summary(store, run["id"])
            rollouts = run_rollouts(store.conn, run["id"], order=order, limit=limit, offset=offset)
            if as_json:
                emit_json({"run": {k: v for k, v in run.items() if k != "summary"}, "summary": summary,
                           "rollouts": rollouts["rollouts"], "page": {k: v for k, v in rollouts.items()
                                                                       if k != "rollouts"}})
                return
            from workbench.cli.eval_cmd import print_summary
            from workbench.cli.run_tables import print_rollouts

            summary.update({k: run["summary"].get(k) for k in ("rollouts_per_s", "unpriced") if k in run["summary"]})
            print_summary(summary)
            console.print(safe_text(f"kind {run['kind']}  status {run['status']}" +
                                    (f" — {run['error']}" if run["error"] else "")))
            print_rollouts(rollouts)
            return
        rollout = get_rollout(store.conn, target)
        if tokens:
            info = print_tokens(store, rollout, tokenizer)
            if as_json:
                emit_json(info)
            return
    if as_json:
        emit_json(rollout)
    else:
        print_transcript(rollout, full)


@click.command("export")
@click.argument("run", required=False)
@click.option("--format", "fmt", type=click.Choice(["jsonl", "atif"]), default="jsonl", show_default=True,
              help="jsonl: chat rows for SFT; atif: a folder of Harbor ATIF trajectories, one trial folder per "
                   "rollout (needs -o FOLDER).")
@click.option("-o", "--output", default="-", help="Output file (default: stdout); with --format atif, a new or "
              "empty folder.")
@click.option("--min-reward", type=float, default=None, help="Only rollouts with at least this total reward.")
@click.option("--include-errors", is_flag=True, help="Also export rollouts that failed.")
@click.option("--source", type=click.Choice(["model", "imported", "human"]), default=None,
              help="Only rollouts from this source; without RUN, those of every run (e.g. --source human: "
                   "every trajectory people played).")
@db_option
@click.pass_context
def export_command(ctx: click.Context, run: str | None, fmt: str, output: str, min_reward: float | None,
                   include_errors: bool, source: str | None, db: str | None) -> None:
    """Export a run's rollouts (or, with --source, every run's from that source) as chat rows ready for
    SFT (one JSON object per line), or with --format atif as Harbor ATIF trajectories (one trial folder
    per rollout)."""
    from workbench.analysis.export import check_output, export_rollouts, run_filter
    from workbench.errors import ConfigError

    if run is None and source is None:
        raise ConfigError("name a RUN to export (`workbench runs` lists them), or --source model|imported|human "
                          "for every run's rollouts from that source")
    if fmt == "atif" and output == "-":
        raise ConfigError("--format atif writes a folder of trajectories, not one stream; give -o FOLDER")
    with open_store(ctx, db, read_only_ok=True, existing=True) as store:
        run_id = store.get_run(run)["id"] if run is not None else None
        query = run_filter(run_id, min_reward=min_reward, include_errors=include_errors, source=source)
        if fmt == "atif":
            from workbench.analysis.export_atif import check_folder, export_atif

            check_folder(Path(output))  # before any rollout is read
            n = export_atif(store, query, Path(output))
            console.print(f"wrote {n} trajectories to {esc(output)} (one trial folder per rollout)")
            return
        if output == "-":
            export_rollouts(store, query, sys.stdout.buffer)
            return
        check_output(Path(output), store.path)  # before any row is read: nothing is lost on a bad -o
        n = export_rollouts(store, query, Path(output))
    console.print(f"wrote {n} rows to {output}")


COMMANDS = [runs_command, show_command, export_command]
