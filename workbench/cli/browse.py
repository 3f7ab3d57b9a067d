"""``workbench runs``, ``show`` and ``export``: read what the store holds."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click
import orjson

from workbench.cli.common import console, db_option, emit_json, json_option, open_store
from workbench.format import cut, esc, fnum, safe_text, visible


@click.command("runs")
@click.argument("run", required=False)
@click.option("--env", default=None, help="Only runs of this environment.")
@click.option("--limit", type=int, default=30, show_default=True)
@db_option
@json_option()
@click.option("--follow", is_flag=True, help="With RUN (a launched run): stream it into the store until it ends.")
@click.pass_context
def runs_command(ctx: click.Context, run: str | None, env: str | None, limit: int, db: str | None,
                 as_json: bool, follow: bool) -> None:
    """List runs, newest first; with RUN, that run (a training run: its steps, evals and events)."""
    from workbench.store.queries import list_runs

    if follow and not run:
        raise click.UsageError("--follow needs a RUN")
    if run:
        with open_store(ctx, db, read_only_ok=True, existing=True) as store:
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
        runs = list_runs(store.conn, limit=limit, env=env)
    if as_json:
        emit_json({"runs": runs})
        return
    if not runs:
        console.print("no runs yet: try `workbench eval arithmetic`")
        return
    cols = ("run", "kind", "env", "model", "status", "rollouts", "errors", "mean reward", "started")
    rows = [(r["id"], r["kind"], r["env_name"], r["model"], r["status"], str(r["rollouts"]), str(r["errors"]),
             fnum(r["mean_reward"]), time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created_at"]))) for r in runs]
    if not console.is_terminal:  # a pipe or a file: whole lines, tab-separated, nothing cut
        sys.stdout.write("\n".join("\t".join(_cell(c) for c in row) for row in [cols, *rows]) + "\n")
        return
    from rich.table import Table

    t = Table(box=None, show_edge=False)
    for col in cols:
        # The run id is what gets copied: never cut; the other text columns fold onto more lines.
        t.add_column(col, justify="right" if col in ("rollouts", "errors", "mean reward") else "left",
                     no_wrap=col in ("run", "started"), overflow="fold",
                     min_width=max(len(r[0]) for r in rows) if col == "run" else None)
    for row in rows:
        t.add_row(*(safe_text(c) for c in row))
    console.print(t, soft_wrap=False)


def _cell(value: str) -> str:
    """A value as one tab-separated cell: control characters visible, no tab or newline inside."""
    return visible(value).replace("\t", " ").replace("\n", " ")


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
        console.print(safe_text("  ".join(f"{k} {fnum(v) if isinstance(v, float) else v}" for k, v in summary.items())))
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
    console.print(Text.assemble("answer: ", safe_text(clip(repr(answer) if isinstance(answer, str) else str(answer)))))
    for name, v in (r.get("rewards") or {}).items():
        console.print(Text.assemble("  reward ", safe_text(name), f" = {v:.3f}"))
    for name, v in (r.get("metrics") or {}).items():
        console.print(Text.assemble("  metric ", safe_text(name), f" = {v:.3f}"))
    for e in r.get("errors") or []:
        console.print(Text.assemble("  ", safe_text(e["kind"], "red"), " in ", safe_text(redact(str(e["source"]))),
                                    ": ", safe_text(clip(redact(str(e["message"]))))))
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
@click.argument("target")
@click.option("--tokens", is_flag=True, help="Show the rollout's tokens with their logprobs and any mismatch.")
@click.option("--tokenizer", default=None, help="Model path or id whose tokenizer decodes and re-renders tokens.")
@click.option("--full", is_flag=True, help="Print long messages in full (else each is cut at 10,000 characters "
              "or 400 lines, with the size left out said).")
@db_option
@json_option()
@click.pass_context
def show_command(ctx: click.Context, target: str, tokens: bool, tokenizer: str | None, full: bool, db: str | None,
                 as_json: bool) -> None:
    """Show a run's summary, or a rollout as a readable transcript (--tokens: its token trace)."""
    from workbench.errors import NotFoundError
    from workbench.store.queries import get_rollout

    with open_store(ctx, db, read_only_ok=True, existing=True) as store:
        run = None
        if "." not in target:
            try:
                run = store.get_run(target)
            except NotFoundError:
                run = None
        if run is not None:
            from workbench.analysis.report import run_summary

            summary = run_summary(store, run["id"])
            if as_json:
                emit_json({"run": {k: v for k, v in run.items() if k != "summary"}, "summary": summary})
                return
            from workbench.cli.eval_cmd import print_summary

            summary.update({k: run["summary"].get(k) for k in ("rollouts_per_s", "unpriced") if k in run["summary"]})
            print_summary(summary)
            console.print(safe_text(f"status {run['status']}" + (f" — {run['error']}" if run["error"] else "")))
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
@click.option("--format", "fmt", type=click.Choice(["jsonl"]), default="jsonl", show_default=True)
@click.option("-o", "--output", default="-", help="Output file (default: stdout).")
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
    SFT (one JSON object per line)."""
    from workbench.analysis.export import check_output, export_rollouts, run_filter
    from workbench.errors import ConfigError

    if run is None and source is None:
        raise ConfigError("name a RUN to export (`workbench runs` lists them), or --source model|imported|human "
                          "for every run's rollouts from that source")
    with open_store(ctx, db, read_only_ok=True, existing=True) as store:
        run_id = store.get_run(run)["id"] if run is not None else None
        query = run_filter(run_id, min_reward=min_reward, include_errors=include_errors, source=source)
        if output == "-":
            export_rollouts(store, query, sys.stdout.buffer)
            return
        check_output(Path(output), store.path)  # before any row is read: nothing is lost on a bad -o
        n = export_rollouts(store, query, Path(output))
    console.print(f"wrote {n} rows to {output}")


COMMANDS = [runs_command, show_command, export_command]
