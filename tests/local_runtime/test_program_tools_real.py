"""A wb.Program agent that sends its own tools, against the real embedded server: `show --tokens`
re-renders each call with the tools that call sent, so the tools block the server rendered into the
prompt is no template drift."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.helpers import agent_script
from workbench.records.trace import Trace
from workbench.rollouts.render import check_trace, load_tokenizer

from .helpers import ROOT, SERVED, server_env

AGENT = '''
import sys
from openai import OpenAI
client = OpenAI()
tools = [{"type": "function", "function": {"name": "lookup", "description": "Look a word up in the glossary.",
          "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}}]
msgs = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": sys.stdin.read()}]
for follow_up in ("Are you sure?", None):
    reply = client.chat.completions.create(model="x", messages=msgs, tools=tools).choices[0].message
    msgs.append({"role": "assistant", "content": reply.content or ""})
    if follow_up:
        msgs.append({"role": "user", "content": follow_up})
print(msgs[-1]["content"])
'''

#: Where a re-render may differ without the template being at fault: inside the model's own reply.
REPLY_CAUSES = ("retokenized reply", "reply re-rendered")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=server_env(), timeout=300)


def test_a_programs_own_tools_re_render_without_template_drift(server: str, tiny_dir: Path, tmp_path: Path) -> None:
    agent = agent_script(tmp_path, "agent.py", AGENT)
    env = tmp_path / "src" / "toolprog.py"
    env.parent.mkdir()
    env.write_text(
        "import workbench as wb\n\n"
        "def load_environment():\n"
        "    return wb.Environment(name='toolprog', tasks=wb.TaskSet.from_records([{'prompt': 'What is 7 + 5?'}]),\n"
        f"                          harness=wb.Program([{sys.executable!r}, {str(agent)!r}]), rubric=wb.Rubric(),\n"
        "                          sampling=wb.Sampling(max_tokens=12))\n")
    db = tmp_path / "wb.db"
    ran = _cli("eval", str(env), "--base-url", server + "/v1", "-m", SERVED, "--db", str(db), "--json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout.strip().splitlines()[-1])["errors"] == 0, ran.stdout
    conn = sqlite3.connect(db)
    rid = conn.execute("SELECT id FROM rollout").fetchone()[0]
    trace = Trace.unpack(*conn.execute("SELECT nodes, token_ids, logprobs, mask FROM trace").fetchone())
    assert trace.calls == 2 and len(trace.branches()) == 1
    assert [t[0]["function"]["name"] for t in trace.call_tools or []] == ["lookup", "lookup"]

    shown = _cli("show", rid, "--tokens", "--tokenizer", str(tiny_dir), "--db", str(db), "--json")
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout.strip().splitlines()[-1])
    assert info["mismatches"] == [] and info["tokens"] > 0
    assert all(m["cause"] in REPLY_CAUSES for m in info["render_mismatches"]), shown.stdout
    assert "template drift" not in shown.stdout

    # What the check rests on: the server rendered the tools into each prompt, and the re-render does too.
    tok = load_tokenizer(str(tiny_dir))
    first = [m for n in trace.branches()[0] if n.call == 0 and n.kind == "env" for m in n.messages]
    rendered = tok.decode(tok.apply_chat_template(first, tools=trace.tools_of(0), add_generation_prompt=True,
                                                  tokenize=True, return_dict=False))
    assert "Look a word up in the glossary." in rendered
    assert "Look a word up in the glossary." in tok.decode(list(trace.branches()[0][0].tokens))
    # Re-rendered without them (the run's harness declares none), both prompts drift: a regression shows.
    trace.call_tools = None
    drift = [m for m in check_trace(trace, tok) if m.cause not in REPLY_CAUSES]
    assert sorted(m.call for m in drift) == [0, 1], [m.describe() for m in drift]
