"""``workbench runs``, ``show`` and ``export``: read what the store holds."""

from __future__ import annotations

import sys
import time
from typing import Any

import click
import orjson

from .common import console, emit_json, fmt_float, open_store


@click.command("runs")
@click.argument("run", required=False)
@click.option("--env", default=None, help="Only runs of this environment.")
@click.option("--limit", type=int, default=30, show_default=True)
@click.option("--db", "db", envvar="WORKBENCH_DB", default=None, help="Store file.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object as the last line of stdout.")
@click.option("--follow", is_flag=True, help="With RUN (a launched run): stream it into the store until it ends.")
@click.pass_context
def runs_command(ctx: click.Context, run: str | None, env: str | None, limit: int, db: str | None,
                 as_json: bool, follow: bool) -> None:
    """List runs, newest first; with RUN, that run (a training run: its steps, evals and events)."""
    from ..store.queries import list_runs

    if follow and not run:
        raise click.UsageError("--follow needs a RUN")
    if run:
        with open_store(ctx, db) as store:
            if follow:
                from cloud_runtime.launch import follow_run

                from .train_cmd import step_line

                def on_event(ev: dict[str, Any]) -> None:
                    row = ev["row"]
                    if ev["kind"] == "train" and row["run_id"] == run:
                        console.print(step_line({**row, "metrics": orjson.loads(row["metrics"])}), markup=False)

                follow_run(store, run, on_event=on_event)
            show_run(store, run, as_json)
        return
    with open_store(ctx, db) as store:
        runs = list_runs(store.conn, limit=limit, env=env)
    if as_json:
        emit_json({"runs": runs})
        return
    if not runs:
        console.print("no runs yet: try `workbench eval arithmetic`")
        return
    from rich.table import Table

    t = Table(box=None, show_edge=False)
    for col in ("run", "kind", "env", "model", "status", "rollouts", "errors", "mean reward", "started"):
        t.add_column(col, justify="right" if col in ("rollouts", "errors", "mean reward") else "left")
    for r in runs:
        t.add_row(r["id"], r["kind"], r["env_name"], r["model"], r["status"], str(r["rollouts"]), str(r["errors"]),
                  fmt_float(r["mean_reward"]), time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created_at"])))
    console.print(t)


def show_run(store: Any, run_id: str, as_json: bool) -> None:
    from ..report import STEP_COLUMNS

    run = store.get_run(run_id)
    steps = store.train_records(run["id"], "step")
    other = [r for r in store.train_records(run["id"]) if r["kind"] != "step"]
    if as_json:
        emit_json({"run": run, "steps": steps, "records": other})
        return
    console.print(f"[bold]{run['kind']} run {run['id']}[/]  env {run['env_name']}  model {run['model']}  "
                  f"status {run['status']}" + (f"  [red]{run['error']}[/]" if run["error"] else ""))
    summary = run["summary"]
    if summary:
        console.print("  ".join(f"{k} {fmt_float(v) if isinstance(v, float) else v}" for k, v in summary.items()))
    if run["kind"] != "train":
        return
    from rich.table import Table

    t = Table(box=None, show_edge=False)
    t.add_column("step", justify="right")
    for title, _, _ in STEP_COLUMNS:
        t.add_column(title, justify="right")
    for rec in steps:
        m = rec["metrics"]
        t.add_row(str(rec["step"]), *(fmt_float(m.get(key), digits) for _, key, digits in STEP_COLUMNS))
    console.print(t)
    for rec in other:
        m = rec["metrics"]
        detail = f"held-out reward {fmt_float(m.get('reward_mean'))} ({rec['message']})" if rec["kind"] == "eval" \
            else rec["message"]
        console.print(f"{rec['kind']:>8} at step {rec['step']}: {detail}")


def print_transcript(r: dict[str, Any]) -> None:
    from rich.panel import Panel

    from ..rollout import content_text

    status = "[green]ok[/]" if r["status"] == "ok" else f"[red]{r['error_kind']}[/]"
    console.print(f"[bold]rollout {r['id']}[/]  run {r['run_id']}  env {r['env_name']}  model {r['model']}  "
                  f"task {r['task_index']} sample {r['sample_index']}  {status}")
    console.print(f"reward {fmt_float(r['reward'])}   turns {r['turns']}   {r['duration_s']:.2f}s   "
                  f"tokens {r['prompt_tokens']}/{r['completion_tokens']}   cost ${r['cost_usd']:.5f}")
    colors = {"system": "magenta", "user": "blue", "assistant": "green", "tool": "yellow"}
    for m in r["messages"]:
        role = m.get("role", "?")
        body = content_text(m.get("content"))
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") or {}
            body += f"\n→ {fn.get('name')}({fn.get('arguments')})"
        title = role + (f" ({m.get('name')})" if m.get("name") else "")
        console.print(Panel(body or "[dim](empty)[/]", title=title, title_align="left",
                            border_style=colors.get(role, "white"), expand=True), markup=False)
    console.print(f"answer: {r['answer']!r}")
    for name, v in (r.get("rewards") or {}).items():
        console.print(f"  reward {name} = {v:.3f}")
    for name, v in (r.get("metrics") or {}).items():
        console.print(f"  metric {name} = {v:.3f}")
    for e in r.get("errors") or []:
        console.print(f"  [red]{e['kind']}[/] in {e['source']}: {e['message']}", markup=True, highlight=False)


def _logprob_style(lp: float | None) -> str:
    if lp is None:
        return "dim"
    if lp > -0.5:
        return "green"
    if lp > -2.0:
        return "yellow"
    return "red"


def print_tokens(store: Any, rollout: dict[str, Any], tokenizer_name: str | None) -> dict[str, Any]:
    """Every trace node's tokens, coloured by logprob; mismatches from recording and re-rendering marked."""
    from rich.text import Text

    from ..errors import NotFoundError
    from ..trace import Trace

    row = store.conn.execute("SELECT nodes, token_ids, logprobs, mask FROM trace WHERE rollout_pk=?",
                             (rollout["pk"],)).fetchone()
    if row is None:
        raise NotFoundError(f"rollout {rollout['id']} has no token trace: its server did not return token ids "
                            "(the embedded server and vLLM do)")
    trace = Trace.unpack(*row)
    tok = None
    if tokenizer_name:
        from ..render import load_tokenizer

        tok = load_tokenizer(tokenizer_name)
    offsets: dict[int, int] = {}  # node id -> token offset within its branch
    by_id = {n.id: n for n in trace.nodes}
    for n in trace.nodes:
        offsets[n.id] = offsets[n.parent] + len(by_id[n.parent].tokens) if n.parent is not None else 0
    mism = {m.call: m for m in trace.mismatches}
    for n in trace.nodes:
        label = f"node {n.id} ({n.kind}, call {n.call}" + (f", policy {n.policy_version}" if n.policy_version
                                                           is not None else "") + f", {len(n.tokens)} tokens)"
        console.print(f"[bold]{label}[/]" + (f" ← node {n.parent}" if n.parent is not None else ""))
        text = Text()
        for i, t in enumerate(n.tokens):
            lp = n.logprobs[i] if i < len(n.logprobs) else None
            piece = tok.decode([t]) if tok is not None else str(t)
            text.append(piece if tok is not None else piece + " ", style=_logprob_style(lp) if n.kind == "assistant"
                        else "blue")
        console.print(text)
        if n.kind == "env" and n.call in mism and n.parent is None:
            m = mism[n.call]
            console.print(f"[bold red]MISMATCH[/] call {m.call}: the prompt re-tokenized the conversation "
                          f"differently at token {m.position} (sampled {m.expected}, server used {m.got}); "
                          "this call starts a new branch")
    rendered = []
    if tok is not None:
        from ..render import check_trace

        for rm in check_trace(trace, tok):
            console.print(f"[bold red]RE-RENDER MISMATCH[/] {rm.describe()}")
            rendered.append({"call": rm.call, "position": rm.position, "cause": rm.cause})
    return {"mismatches": [{"call": m.call, "position": m.position, "expected": m.expected, "got": m.got}
                           for m in trace.mismatches], "render_mismatches": rendered,
            "tokens": sum(len(n.tokens) for n in trace.nodes)}


@click.command("show")
@click.argument("target")
@click.option("--tokens", is_flag=True, help="Show the rollout's tokens with their logprobs and any mismatch.")
@click.option("--tokenizer", default=None, help="Model path or id whose tokenizer decodes and re-renders tokens.")
@click.option("--db", "db", envvar="WORKBENCH_DB", default=None, help="Store file.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object as the last line of stdout.")
@click.pass_context
def show_command(ctx: click.Context, target: str, tokens: bool, tokenizer: str | None, db: str | None,
                 as_json: bool) -> None:
    """Show a run's summary, or a rollout as a readable transcript (--tokens: its token trace)."""
    from ..errors import NotFoundError
    from ..store.queries import get_rollout

    with open_store(ctx, db) as store:
        run = None
        if "." not in target:
            try:
                run = store.get_run(target)
            except NotFoundError:
                run = None
        if run is not None:
            from ..report import run_summary

            summary = run_summary(store, run["id"])
            if as_json:
                emit_json({"run": {k: v for k, v in run.items() if k != "summary"}, "summary": summary})
                return
            from .eval_cmd import print_summary

            summary.update({k: run["summary"].get(k) for k in ("rollouts_per_s", "unpriced") if k in run["summary"]})
            print_summary(summary)
            console.print(f"status {run['status']}" + (f" — {run['error']}" if run["error"] else ""))
            return
        rollout = get_rollout(store.conn, target)
        if tokens:
            if tokenizer is None:
                from ..render import default_tokenizer_for

                tokenizer = default_tokenizer_for(rollout["model"])
            info = print_tokens(store, rollout, tokenizer)
            if as_json:
                emit_json(info)
            return
    if as_json:
        emit_json(rollout)
    else:
        print_transcript(rollout)


@click.command("export")
@click.argument("run")
@click.option("--format", "fmt", type=click.Choice(["jsonl"]), default="jsonl", show_default=True)
@click.option("-o", "--output", default="-", help="Output file (default: stdout).")
@click.option("--min-reward", type=float, default=None, help="Only rollouts with at least this total reward.")
@click.option("--include-errors", is_flag=True, help="Also export rollouts that failed.")
@click.option("--db", "db", envvar="WORKBENCH_DB", default=None, help="Store file.")
@click.pass_context
def export_command(ctx: click.Context, run: str, fmt: str, output: str, min_reward: float | None,
                   include_errors: bool, db: str | None) -> None:
    """Export a run's rollouts as chat rows ready for SFT (one JSON object per line)."""
    with open_store(ctx, db) as store:
        run_row = store.get_run(run)
        sql = ("SELECT id, task_id, task_index, sample_index, reward, status, messages, answer, info FROM rollout "
               "WHERE run_id=?")
        args: list[Any] = [run_row["id"]]
        if not include_errors:
            sql += " AND status='ok'"
        if min_reward is not None:
            sql += " AND reward >= ?"
            args.append(min_reward)
        sql += " ORDER BY task_index, sample_index"
        out = sys.stdout.buffer if output == "-" else open(output, "wb")  # noqa: SIM115
        n = 0
        try:
            for rid, task_id, ti, si, reward, status, messages, answer, info in store.conn.execute(sql, args):
                row = {"messages": orjson.loads(messages),
                       "metadata": {"run_id": run_row["id"], "rollout_id": rid, "env": run_row["env_name"],
                                    "env_version": run_row["env_version"], "model": run_row["model"],
                                    "task_id": task_id, "task_index": ti, "sample_index": si, "reward": reward,
                                    "status": status, "answer": orjson.loads(answer), "info": orjson.loads(info)}}
                out.write(orjson.dumps(row, option=orjson.OPT_NON_STR_KEYS) + b"\n")
                n += 1
        finally:
            if out is not sys.stdout.buffer:
                out.close()
    if output != "-":
        console.print(f"wrote {n} rows to {output}")


COMMANDS = [runs_command, show_command, export_command]
