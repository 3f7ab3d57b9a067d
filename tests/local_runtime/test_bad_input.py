"""What a user can get wrong: unknown model, no chat template, an over-long prompt, too many requests,
malformed JSON, unknown model names. Each ends in a clear message, never a crash or traceback."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from .helpers import ARITH, ROOT, SERVED, get_json, run_server, server_env


def raw_post(url: str, data: bytes) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def start_fails(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "local_runtime.server", *args], capture_output=True, text=True,
                          env=server_env(), cwd=ROOT, timeout=120)


def test_malformed_json_is_400(server: str) -> None:
    for body in (b"{not json", b"", b"[1, 2]"):
        status, err = raw_post(server + "/v1/chat/completions", body)
        assert status == 400
        assert err["error"]["code"] == 400 and err["error"]["message"]
    status, err = raw_post(server + "/v1/chat/completions", b'{"model": "workbench-tiny", "messages": "hi"}')
    assert status == 400 and "messages" in err["error"]["message"]
    status, err = raw_post(server + "/v1/chat/completions", json.dumps({"messages": ARITH, "n": 0}).encode())
    assert status == 400 and "n" in err["error"]["message"]


def test_unknown_model_name_is_404(client: Any) -> None:
    import openai

    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-9", messages=ARITH)
    assert "gpt-9" in str(e.value) and SERVED in str(e.value)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-9", prompt="hi")


def test_workbench_client_classifies_404(server: str) -> None:
    from workbench.rollouts.client import ChatClient, ModelError

    async def go() -> None:
        async with ChatClient(max_retries=0) as c:
            with pytest.raises(ModelError) as e:
                await c.chat(base_url=server + "/v1", model="nope", messages=ARITH)
            assert e.value.kind == "unknown_model"
            r = await c.chat(base_url=server + "/v1", model=SERVED, messages=ARITH,
                             params={"max_tokens": 4, "logprobs": True, "return_token_ids": True})
            assert r.extra and r.extra["policy_version"] == 0 and r.extra["token_ids"]
            assert r.extra["logprobs"]["content"] and r.extra["prompt_token_ids"]

    asyncio.run(go())


def test_over_long_prompt_finishes_with_length(client: Any) -> None:
    long = " ".join(["apple river cloud"] * 800)  # several thousand tokens; the context is 1024
    r = client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": long}], max_tokens=8,
                                       extra_body={"return_token_ids": True})
    c = r.choices[0]
    assert c.finish_reason == "length"
    assert r.usage.prompt_tokens > 1024
    assert len(r.model_extra["prompt_token_ids"]) < 1024  # the most recent tokens were kept
    assert r.usage.model_extra["prompt_tokens_truncated"] > 0
    # a huge max_tokens is clipped to the context, not an error
    r = client.chat.completions.create(model=SERVED, messages=ARITH, max_tokens=100_000)
    assert r.choices[0].finish_reason in ("stop", "length")


def test_n_larger_than_batch_is_400(client: Any) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=SERVED, messages=ARITH, n=100)
    assert "--max-batch" in str(e.value)


async def test_over_capacity_is_429(tiny_dir: Path) -> None:
    import openai

    with run_server(tiny_dir, "--served-model-name", SERVED, "--max-batch", "1", "--max-queue", "2",
                    "--batch-wait-ms", "0") as root:
        c = openai.AsyncOpenAI(base_url=root + "/v1", api_key="x", max_retries=0)

        async def one() -> str:
            try:
                await c.chat.completions.create(model=SERVED, messages=ARITH, max_tokens=40,
                                                extra_body={"ignore_eos": True})
                return "ok"
            except openai.RateLimitError as e:
                assert "capacity" in str(e)
                return "429"

        results = await asyncio.gather(*(one() for _ in range(10)))
        assert "429" in results and "ok" in results
        assert get_json(root + "/health")["rejected"] == results.count("429")


def test_unknown_model_path_at_startup(tmp_path: Path) -> None:
    p = start_fails("--model", str(tmp_path / "missing-model"))
    assert p.returncode == 2
    assert "no model directory at" in p.stderr and "Traceback" not in p.stderr
    (tmp_path / "empty").mkdir()
    p = start_fails("--model", str(tmp_path / "empty"))
    assert p.returncode == 2 and "no config.json" in p.stderr and "Traceback" not in p.stderr


def test_unknown_hub_id_at_startup(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "local_runtime.server", "--model", "no-such-org/no-such-model"],
                       capture_output=True, text=True, env={**server_env(), "HF_HOME": str(tmp_path)}, cwd=ROOT,
                       timeout=120)
    assert p.returncode == 2
    assert "not in the Hugging Face cache" in p.stderr and "Traceback" not in p.stderr


def test_bad_flags_at_startup(tiny_dir: Path) -> None:
    p = start_fails("--model", str(tiny_dir), "--adapter", "no-equals-sign")
    assert p.returncode == 2 and "NAME=PATH" in p.stderr and "Traceback" not in p.stderr
    p = start_fails("--model", str(tiny_dir), "--chat-template", "/no/such/template.jinja")
    assert p.returncode == 2 and "no such file" in p.stderr


def test_tokenizer_without_chat_template(tiny_dir: Path, tmp_path: Path) -> None:
    import openai

    bare = tmp_path / "bare"
    shutil.copytree(tiny_dir, bare)
    template = (bare / "chat_template.jinja").read_text() if (bare / "chat_template.jinja").exists() else None
    (bare / "chat_template.jinja").unlink(missing_ok=True)
    cfg = json.loads((bare / "tokenizer_config.json").read_text())
    template = template or cfg.pop("chat_template", None)
    cfg.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert template
    with run_server(bare, "--served-model-name", "bare") as root:
        c = openai.OpenAI(base_url=root + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model="bare", messages=ARITH)
        assert "no chat template" in str(e.value) and "--chat-template" in str(e.value)
        assert c.completions.create(model="bare", prompt="Hello", max_tokens=3).choices[0].finish_reason
    tpl = tmp_path / "template.jinja"
    tpl.write_text(template)
    with run_server(bare, "--served-model-name", "bare", "--chat-template", str(tpl)) as root:
        c = openai.OpenAI(base_url=root + "/v1", api_key="x", max_retries=0)
        # Greedy, so the reply is the same every run (sampled, the tiny model may end its turn at once).
        assert c.chat.completions.create(model="bare", messages=ARITH, max_tokens=4,
                                         temperature=0).choices[0].message.content
