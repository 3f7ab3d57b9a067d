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
from workbench.records.rollout import Rollout
from workbench.records.trace import Trace
from workbench.rollouts.client import ChatClient
from workbench.rollouts.continuation import TokenContinuation
from workbench.rollouts.proxy import InterceptionProxy
from workbench.rollouts.render import check_trace, load_tokenizer

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
    # wordle asks for up to 512 tokens a turn: by the third turn the conversation can outgrow the tiny
    # model's 1024-token context, which the server refuses (as vLLM does) rather than cutting it.
    summary = _eval("wordle", server, db, "-n", "2", "-a", '{"max_turns": 3}', "--max-tokens", "96")
    assert summary["rollouts"] == 2 and summary["errors"] == 0
    # Token continuation: turn N's prompt extends turn N-1's tokens exactly, whatever the model sampled.
    assert summary["metrics"]["token_mismatch"] == 0.0
    rows = sqlite3.connect(db).execute("SELECT nodes, token_ids, logprobs, mask FROM trace").fetchall()
    assert len(rows) == 2
    traces = [Trace.unpack(*row) for row in rows]
    assert all(t.calls >= 2 and len(t.branches()) == 1 for t in traces)

    tok = load_tokenizer(str(tiny_dir))
    # The model's own template renders every prompt segment exactly; where a re-render differs at
    # all, it is inside a sampled reply (a non-canonical tokenization, a parsed tool call).
    own = [m for t in traces for m in check_trace(t, tok)]
    assert all(m.cause in ("retokenized reply", "reply re-rendered") for m in own), [m.describe() for m in own]

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
    assert "⚠ re-render call" in out.stdout and "whitespace" in out.stdout
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["mismatches"] == [] and info["render_mismatches"] and info["tokens"] > 0


async def test_continuation_keeps_a_non_canonical_reply_exact(server: str, tiny_dir: Path) -> None:
    """A reply sampled as single-character tokens would re-render as other tokens; the follow-up
    call sent through token continuation keeps the sampled ids, and the server's own re-render
    (the route without continuation) does not."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_dir), local_files_only=True)  # its vocabulary API, for the scenario
    rendered = list(tok.apply_chat_template(ARITH, add_generation_prompt=True, tokenize=True, return_dict=False))
    chars = tok.convert_tokens_to_ids(list("twelve"))
    assert tok.unk_token_id not in chars and chars != tok("twelve", add_special_tokens=False)["input_ids"]
    sampled = [*chars, tok.eos_token_id]
    reply = {"role": "assistant", "content": "twelve"}
    follow_up = [*ARITH, reply, {"role": "user", "content": "Are you sure?"}]
    params = {"logprobs": True, "return_token_ids": True, "max_tokens": 4, "seed": 1}

    client = ChatClient(None)
    try:
        results = {}
        for continued in (True, False):
            r = Rollout(id="c.0.0", task=wb.Task(prompt="x"), sample_index=0, client=client,
                        base_url=server + "/v1", model=SERVED, params=params,
                        continuation=TokenContinuation(client, server + "/v1", SERVED) if continued else None)
            r.trace.record(ARITH, reply, rendered, sampled, [0.0] * len(sampled))
            await r.generate(follow_up)
            results[continued] = r.trace
    finally:
        await client.close()

    exact = results[True]
    assert exact.mismatches == [] and len(exact.branches()) == 1
    ids, _, mask = exact.sequence(exact.branches()[0])
    assert ids[: len(rendered) + len(sampled)] == [*rendered, *sampled]  # the sampled ids, untouched
    gap = ids[len(rendered) + len(sampled): len(ids) - sum(mask[len(rendered) + len(sampled):])]
    assert tok.decode(gap) == "\n<|im_start|>user\nAre you sure?<|im_end|>\n<|im_start|>assistant\n"
    # Without continuation the server re-tokenizes "twelve": the mismatch the trace exists to catch.
    rerendered = results[False]
    assert len(rerendered.mismatches) == 1
    assert len(rendered) <= rerendered.mismatches[0].position < len(rendered) + len(chars)  # inside the reply


async def test_proxy_continues_follow_up_calls_exactly(server: str) -> None:
    """A program calling through the interception proxy gets token continuation too (streamed and not)."""
    base = server + "/v1"
    client = ChatClient(None)
    params = {"logprobs": True, "return_token_ids": True, "temperature": 1.0, "seed": 11, "max_tokens": 12}
    proxy = await InterceptionProxy(client, base, SERVED, params).start()
    cont = TokenContinuation(client, base, SERVED)
    r = Rollout(id="p.0.0", task=wb.Task(prompt="x"), sample_index=0, client=client, base_url=proxy.url_for("p.0.0"),
                model=SERVED, params=params, continuation=cont)
    proxy.register(r)
    try:
        oa = openai.AsyncOpenAI(base_url=r.base_url, api_key="unused", max_retries=0)
        msgs: list[dict[str, Any]] = list(ARITH)
        for turn in range(3):
            stream = turn == 1
            if stream:
                text = "".join([c.choices[0].delta.content or "" async for c in await oa.chat.completions.create(
                    model="m", messages=msgs, stream=True) if c.choices])
            else:
                text = (await oa.chat.completions.create(model="m", messages=msgs)).choices[0].message.content or ""
            msgs += [{"role": "assistant", "content": text}, {"role": "user", "content": f"Try again ({turn})."}]
    finally:
        await proxy.close()
        await client.close()
    assert r.trace.calls == 3 and r.trace.mismatches == [] and len(r.trace.branches()) == 1
    assert cont.continued == 2 and cont.fallbacks == 0
