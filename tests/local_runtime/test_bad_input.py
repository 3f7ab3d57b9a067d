"""What a user can get wrong: unknown model, no chat template, an over-long prompt, too many requests,
malformed JSON, out-of-range sampling parameters, unknown model names. Each ends in one clear message in
OpenAI's error shape (``type``, ``param``, a string ``code``), never a crash or traceback."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CliResult, last_json, query

from .helpers import ARITH, ROOT, SERVED, get_json, run_server, server_env


def raw_post(url: str, data: bytes) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def start_fails(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workbench_local.server", *args], capture_output=True, text=True,
                          env=server_env(), cwd=ROOT, timeout=120)


def test_malformed_json_is_400(server: str) -> None:
    for body in (b"{not json", b"", b"[1, 2]"):
        status, err = raw_post(server + "/v1/chat/completions", body)
        assert status == 400
        assert err["error"]["type"] == "invalid_request_error" and err["error"]["message"]
        assert err["error"]["code"] is None and err["error"]["param"] is None
    status, err = raw_post(server + "/v1/chat/completions", b'{"model": "workbench-tiny", "messages": "hi"}')
    assert status == 400 and "messages" in err["error"]["message"]
    assert (err["error"]["param"], err["error"]["code"]) == ("messages", "invalid_type")
    status, err = raw_post(server + "/v1/chat/completions", b'{"model": "workbench-tiny"}')
    assert (err["error"]["param"], err["error"]["code"]) == ("messages", "missing_required_parameter")
    status, err = raw_post(server + "/v1/chat/completions", b'{"messages": []}')
    assert status == 400 and err["error"]["param"] == "messages"


#: (extra request fields, the param the 400 names, a phrase of its message)
OUT_OF_RANGE = [
    ({"temperature": 2.5}, "temperature", "less than or equal to 2"),
    ({"temperature": -0.1}, "temperature", "greater than or equal to 0"),
    ({"top_p": 0}, "top_p", "greater than 0"),
    ({"top_p": 1.5}, "top_p", "less than or equal to 1"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "less than or equal to 20"),
    ({"logprobs": True, "top_logprobs": -1}, "top_logprobs", "greater than or equal to 0"),
    ({"presence_penalty": 2.5}, "presence_penalty", "less than or equal to 2"),
    ({"presence_penalty": -3}, "presence_penalty", "greater than or equal to -2"),
    ({"frequency_penalty": 2.01}, "frequency_penalty", "less than or equal to 2"),
    ({"frequency_penalty": -2.5}, "frequency_penalty", "greater than or equal to -2"),
    ({"logit_bias": {"5": 101}}, "logit_bias", "less than or equal to 100"),
    ({"logit_bias": {"5": -100.5}}, "logit_bias", "greater than or equal to -100"),
    ({"logit_bias": {"hello": 1}}, "logit_bias", "token ids"),
    ({"logit_bias": {"99999999": 1}}, "logit_bias", "token ids"),
    ({"logit_bias": {"-1": 1}}, "logit_bias", "token ids"),
    ({"n": 0}, "n", "greater than or equal to 1"),
    ({"max_tokens": -1}, "max_tokens", "greater than or equal to 0"),
]


@pytest.mark.parametrize(("extra", "param", "phrase"), OUT_OF_RANGE, ids=[f"{p}={list(e.values())[-1]}" for e, p, _ in
                                                                           OUT_OF_RANGE])
def test_out_of_range_sampling_parameters_are_400_naming_the_param(client: Any, extra: dict[str, Any], param: str,
                                                                   phrase: str) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=SERVED, messages=ARITH, max_tokens=2, extra_body=extra)
    err = e.value
    assert err.status_code == 400 and err.type == "invalid_request_error"
    assert err.param == param and err.code == "invalid_value"
    assert phrase in err.message and len(err.message.splitlines()) == 1


@pytest.mark.parametrize("extra", [{"temperature": 2}, {"top_p": 1}, {"presence_penalty": -2, "frequency_penalty": 2},
                                   {"logit_bias": {"5": 100, "6": -100}}, {"logprobs": True, "top_logprobs": 20}])
def test_the_ends_of_each_range_are_accepted(client: Any, extra: dict[str, Any]) -> None:
    r = client.chat.completions.create(model=SERVED, messages=ARITH, max_tokens=2, extra_body=extra)
    assert r.choices[0].finish_reason in ("stop", "length")


def test_unknown_model_name_is_404(client: Any) -> None:
    import openai

    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-9", messages=ARITH)
    assert "gpt-9" in str(e.value) and SERVED in str(e.value)
    assert (e.value.type, e.value.param, e.value.code) == ("not_found_error", "model", "model_not_found")
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-9", prompt="hi")


def test_workbench_client_classifies_404(server: str) -> None:
    from workbench.records.model_reply import ModelError
    from workbench.rollouts.client import ChatClient

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


def test_a_prompt_over_the_context_is_400_with_the_lengths(client: Any, server: str) -> None:
    """As vLLM answers: never a silently cut prompt (a trace whose prompt is not what was sent)."""
    import openai

    long = " ".join(["apple river cloud"] * 800)  # several thousand tokens; the context is 1024
    msgs = [{"role": "user", "content": long}]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=SERVED, messages=msgs)
    err = e.value
    assert (err.code, err.param, err.type) == ("context_length_exceeded", "messages", "invalid_request_error")
    assert "maximum context length is 1024 tokens" in err.message and "resulted in" in err.message
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=SERVED, messages=msgs, max_tokens=8)
    prompt = int(e.value.message.split("(")[1].split(" in the messages")[0])
    assert prompt > 1024 and f"you requested {prompt + 8} tokens ({prompt} in the messages, 8 in the completion)" \
        in e.value.message
    # A prompt that fits is served whatever max_tokens asks: it is a cap, clipped to what the context
    # leaves, given or not (an environment sized for a larger model still runs on the tiny one).
    for cap in ({"max_tokens": 100_000}, {}):
        r = client.chat.completions.create(model=SERVED, messages=ARITH, extra_body={"ignore_eos": True}, **cap)
        assert r.choices[0].finish_reason == "length" and r.usage.total_tokens == 1024, cap
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=SERVED, prompt=long, max_tokens=4)
    assert (e.value.code, e.value.param) == ("context_length_exceeded", "prompt")
    status, body = raw_post(server + "/v1/chat/completions/tokens",
                            json.dumps({"messages": ARITH, "tokens": [5] * 1024}).encode())
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"


def test_workbench_client_ends_a_call_over_the_context_with_a_clear_kind(server: str) -> None:
    from workbench.records.model_reply import ModelError
    from workbench.rollouts.client import ChatClient

    async def go() -> None:
        async with ChatClient(max_retries=3) as c:
            with pytest.raises(ModelError) as e:
                await c.chat(base_url=server + "/v1", model=SERVED,
                             messages=[{"role": "user", "content": "apple river cloud " * 800}])
            assert e.value.kind == "context_length" and not e.value.retryable and c.retries == 0
            assert "maximum context length is 1024 tokens" in e.value.message

    asyncio.run(go())


OVER_CONTEXT_ENV = '''
import workbench as wb


def load_environment():
    rubric = wb.Rubric()

    @rubric.reward
    def answered(completion: str) -> float:
        return 1.0

    rows = [{"prompt": "What is 7 + 5?"}, {"prompt": "apple river cloud " * 800}, {"prompt": "What is 2 + 2?"}]
    return wb.Environment(name="overlong", tasks=wb.TaskSet.from_records(rows), harness=wb.SingleTurn(),
                          rubric=rubric)
'''


def test_a_rollout_over_the_context_ends_with_that_reason_and_the_run_goes_on(
        server: str, cli: Callable[..., CliResult], write_env: Callable[..., Path], store_path: Path) -> None:
    res = cli("eval", write_env(OVER_CONTEXT_ENV), "--base-url", server + "/v1", "-m", SERVED, "-n", "3",
              "--db", store_path, "--json", "--max-tokens", "8", timeout=300)
    assert res.rc == 0, res.stderr
    s = last_json(res.stdout)
    assert s["rollouts"] == 3 and s["errors"] == 1 and s["error_kinds"] == {"model.context_length": 1}
    rows = query(store_path, "SELECT r.task_index, e.kind, e.message FROM rollout r JOIN rollout_error e "
                             "ON e.rollout_pk = r.pk")
    assert [(i, kind) for i, kind, _ in rows] == [(1, "model.context_length")]
    assert "maximum context length is 1024 tokens" in rows[0][2] and "in the messages" in rows[0][2]
    assert query(store_path, "SELECT status FROM rollout ORDER BY task_index") == [("ok",), ("error",), ("ok",)]


def test_n_larger_than_batch_is_400(client: Any) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=SERVED, messages=ARITH, n=100)
    assert "--max-batch" in str(e.value) and e.value.param == "n"


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
                assert (e.type, e.code) == ("rate_limit_error", "rate_limit_exceeded")
                return "429"

        results = await asyncio.gather(*(one() for _ in range(10)))
        assert "429" in results and "ok" in results
        assert get_json(root + "/health")["rejected"] == results.count("429")


@pytest.mark.slow  # server processes that refuse at startup, seconds each
def test_unknown_model_path_at_startup(tmp_path: Path) -> None:
    p = start_fails("--model", str(tmp_path / "missing-model"))
    assert p.returncode == 2
    assert "no model directory at" in p.stderr and "Traceback" not in p.stderr
    (tmp_path / "empty").mkdir()
    p = start_fails("--model", str(tmp_path / "empty"))
    assert p.returncode == 2 and "no config.json" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow  # server processes that refuse at startup, seconds each
def test_unknown_hub_id_at_startup(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "workbench_local.server", "--model", "no-such-org/no-such-model"],
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
