"""Token-exact traces against the real embedded server: the proxy records the server's own token
ids, multi-turn rollouts extend their tokens exactly, and an altered chat template is caught."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai

import workbench as wb
from workbench.client import ChatClient
from workbench.proxy import InterceptionProxy
from workbench.render import check_trace, load_tokenizer
from workbench.rollout import Rollout
from workbench.trace import Trace

from .helpers import ARITH, ROOT, SERVED, server_env


async def test_proxy_records_exactly_the_servers_tokens(server: str) -> None:
    base = server + "/v1"
    client = ChatClient(None)
    params = {"logprobs": True, "return_token_ids": True, "temperature": 1.0, "seed": 7, "max_tokens": 8}
    proxy = await InterceptionProxy(client, base, SERVED, params).start()
    r = Rollout(id="t.0.0", task=wb.Task(prompt="x"), sample_index=0, client=client, base_url=proxy.url_for("t.0.0"),
                model=SERVED, params=params)
    proxy.register(r)
    try:
        oa = openai.AsyncOpenAI(base_url=r.base_url, api_key="unused", max_retries=0)
        via_proxy = await oa.chat.completions.create(model="anything", messages=ARITH)
        direct = await openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0).chat.completions.create(
            model=SERVED, messages=ARITH, extra_body={k: v for k, v in params.items() if k != "max_tokens"},
            max_tokens=8)
    finally:
        await proxy.close()
        await client.close()
    raw = direct.model_dump()
    env_node, reply = r.trace.nodes
    assert list(env_node.tokens) == raw["prompt_token_ids"]
    assert list(reply.tokens) == raw["choices"][0]["token_ids"]
    assert via_proxy.choices[0].message.content == direct.choices[0].message.content
    lps = [t["logprob"] for t in raw["choices"][0]["logprobs"]["content"]]
    assert len(reply.logprobs) == len(lps)
    assert all(abs(a - b) < 1e-5 for a, b in zip(reply.logprobs, lps, strict=True))


def _eval(env: str, server: str, db: Path, *args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "eval", env, "--base-url", server + "/v1", "-m",
                          SERVED, "--db", str(db), "--json", *args], capture_output=True, text=True, cwd=ROOT,
                         env=server_env(), timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_multi_turn_tokens_extend_and_an_altered_template_is_caught(server: str, tiny_dir: Path,
                                                                      tmp_path: Path) -> None:
    db = tmp_path / "wb.db"
    summary = _eval("wordle", server, db, "-n", "2", "-a", '{"max_turns": 3}')
    assert summary["rollouts"] == 2 and summary["errors"] == 0
    assert summary["metrics"]["token_mismatch"] == 0.0  # turn N's prompt extends turn N-1's tokens
    rows = sqlite3.connect(db).execute("SELECT nodes, token_ids, logprobs, mask FROM trace").fetchall()
    assert len(rows) == 2
    traces = [Trace.unpack(*row) for row in rows]
    assert all(t.calls >= 2 and len(t.branches()) == 1 for t in traces)

    tok = load_tokenizer(str(tiny_dir))
    assert all(check_trace(t, tok) == [] for t in traces)  # the model's own template renders them exactly

    altered = tmp_path / "altered"
    shutil.copytree(tiny_dir, altered)
    jinja = altered / "chat_template.jinja"
    template = jinja.read_text()
    # Drift: the template now appends a space to every message's content.
    jinja.write_text(template.replace("{{- m.content -}}", "{{- m.content + ' ' -}}"))
    assert jinja.read_text() != template, "the test could not find the content expression in the template"
    found = [m for t in traces for m in check_trace(t, load_tokenizer(str(altered)))]
    assert found, "a template that adds whitespace must be caught"
    assert found[0].cause == "whitespace"

    # The CLI shows the tokens and marks the re-render mismatch.
    rid = sqlite3.connect(db).execute("SELECT id FROM rollout LIMIT 1").fetchone()[0]
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "show", rid, "--tokens", "--tokenizer", str(altered),
                          "--db", str(db), "--json"], capture_output=True, text=True, cwd=ROOT, env=server_env(),
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "RE-RENDER MISMATCH" in out.stdout
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["mismatches"] == [] and info["render_mismatches"] and info["tokens"] > 0
