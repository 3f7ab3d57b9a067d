"""Token-exact traces, the interception proxy and external agent programs (issue 3, items 3-5)."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

import workbench as wb
from tests.helpers import CHAT_ENV, CliResult, MockServer, last_json
from workbench.records.rollout import Rollout
from workbench.records.trace import Trace
from workbench.rollouts.client import ChatClient
from workbench.rollouts.proxy import InterceptionProxy
from workbench.testing.mock_openai import toy_render, toy_tokens

# slow: token traces and external agent programs through CLI evals
pytestmark = pytest.mark.slow

U1 = {"role": "user", "content": "guess a word"}
A1 = {"role": "assistant", "content": "crane please"}
U2 = {"role": "user", "content": "XXGYX try again"}
A2 = {"role": "assistant", "content": "slate"}


def _completion(msg: dict[str, Any]) -> list[int]:
    return [*toy_tokens(msg["content"]), 5]


# -- the trace graph ------------------------------------------------------------------------------
def test_consistent_multi_turn_is_one_branch_with_exact_tokens() -> None:
    t = Trace()
    t.record([U1], A1, toy_render([U1]), _completion(A1), [-0.1, -0.2, -0.3])
    t.record([U1, A1, U2], A2, toy_render([U1, A1, U2]), _completion(A2), [-0.5, -0.6])
    assert t.mismatches == []
    [branch] = t.branches()
    assert [n.kind for n in branch] == ["env", "assistant", "env", "assistant"]
    ids, lps, mask = t.sequence(branch)
    # The branch's tokens are exactly the last prompt followed by the last completion.
    assert ids == toy_render([U1, A1, U2]) + _completion(A2)
    assert mask == [0] * len(toy_render([U1])) + [1] * 3 + [0] * (len(toy_render([U1, A1, U2])) - len(
        toy_render([U1])) - 3) + [1, 1]
    assert lps[len(toy_render([U1])):len(toy_render([U1])) + 3] == pytest.approx([-0.1, -0.2, -0.3])


def test_retokenization_drift_is_a_mismatch_at_the_first_differing_position() -> None:
    t = Trace()
    t.record([U1], A1, toy_render([U1]), _completion(A1))
    drifted = toy_render([U1, A1, U2], drift=True)  # the template dropped the assistant's last word
    t.record([U1, A1, U2], A2, drifted, _completion(A2))
    [m] = t.mismatches
    first_turn = toy_render([U1]) + _completion(A1)
    expected_pos = next(i for i, (a, b) in enumerate(zip(first_turn, drifted, strict=False)) if a != b)
    assert (m.call, m.position) == (1, expected_pos)
    assert m.expected == first_turn[expected_pos] and m.got == drifted[expected_pos]
    # The server's view becomes its own branch, so training never mixes the two tokenizations.
    assert len(t.branches()) == 2


def test_compaction_branches_and_pack_roundtrip() -> None:
    t = Trace()
    t.record([U1], A1, toy_render([U1]), _completion(A1), [-1.0, -1.0, -1.0])
    summary = {"role": "user", "content": "summary of the game so far"}
    t.record([summary], A2, toy_render([summary]), _completion(A2))
    assert len(t.branches()) == 2 and not t.mismatches
    back = Trace.unpack(*t.pack())
    assert [(n.id, n.parent, n.kind, list(n.tokens)) for n in back.nodes] == [
        (n.id, n.parent, n.kind, list(n.tokens)) for n in t.nodes]
    assert list(back.nodes[1].logprobs) == [-1.0, -1.0, -1.0]
    assert [t.sequence(b) for b in t.branches()] == [back.sequence(b) for b in back.branches()]


# -- the proxy with the official OpenAI client ------------------------------------------------------
@pytest.fixture
def token_mock(mock_server: Callable[..., MockServer]) -> MockServer:
    return mock_server("echo", "--tokens")


async def _proxy_rollout(base_url: str) -> tuple[ChatClient, InterceptionProxy, Rollout]:
    client = ChatClient(None)
    proxy = await InterceptionProxy(client, base_url, "mock-model",
                                    {"logprobs": True, "return_token_ids": True}).start()
    task = wb.Task(prompt="hi")
    r = Rollout(id="run.0.0", task=task, sample_index=0, client=client, base_url=proxy.url_for("run.0.0"),
                model="mock-model", params={"temperature": 0.7, "logprobs": True, "return_token_ids": True})
    proxy.register(r)
    return client, proxy, r


async def test_proxy_records_chat_and_stream_with_server_token_ids(token_mock: MockServer) -> None:
    client, proxy, r = await _proxy_rollout(token_mock.base_url)
    try:
        oa = openai.AsyncOpenAI(base_url=r.base_url, api_key="anything")
        resp = await oa.chat.completions.create(model="gpt-whatever", messages=[U1])
        assert resp.choices[0].message.content == U1["content"]
        echoed = {"role": "assistant", "content": resp.choices[0].message.content}
        stream = await oa.chat.completions.create(
            model="gpt-whatever", messages=[U1, echoed, U2], stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text == U2["content"]
    finally:
        await proxy.close()
        await client.close()
    assert len(r.calls) == 2
    assert r.trace.mismatches == []
    env0, a0, env1, a1 = r.trace.nodes
    # What was recorded is what the server produced: its prompt token ids and its sampled ids.
    assert list(env0.tokens) == toy_render([U1])
    assert list(a0.tokens) == _completion(U1)
    assert len(a0.logprobs) == len(a0.tokens)
    assert list(env0.tokens) + list(a0.tokens) + list(env1.tokens) == toy_render(
        [U1, {"role": "assistant", "content": U1["content"]}, U2])
    assert list(a1.tokens) == _completion(U2)  # the streamed call too
    assert len(a1.logprobs) == len(a1.tokens)


async def test_proxy_applies_the_runs_sampling_and_model(mock_server: Callable[..., MockServer]) -> None:
    """The run decides the model, the sampling settings and the training fields (logprobs, token ids): the
    upstream gets the run's values even where the harness sends its own, streamed calls included."""
    mock = mock_server("echo", "--tokens")
    run = {**wb.Sampling(max_tokens=64, temperature=0.7, top_p=0.9, stop=["END"], seed=11).to_params(),
           "logprobs": True, "return_token_ids": True}
    client = ChatClient(None)
    proxy = await InterceptionProxy(client, mock.base_url, "mock-model", dict(run)).start()
    r = Rollout(id="run.0.0", task=wb.Task(prompt="hi"), sample_index=0, client=client,
                base_url=proxy.url_for("run.0.0"), model="mock-model", params=dict(run))
    proxy.register(r)
    harness = {"temperature": 0.0, "max_tokens": 3, "top_p": 0.1, "stop": ["x"], "seed": 99, "logprobs": False,
               "extra_body": {"return_token_ids": False}}
    try:
        oa = openai.AsyncOpenAI(base_url=r.base_url, api_key="x")
        await oa.chat.completions.create(model="some-other-model", messages=[U1], **harness)
        stream = await oa.chat.completions.create(model="some-other-model", messages=[U1], stream=True,
                                                  stream_options={"include_usage": False}, **harness)
        [c async for c in stream]
    finally:
        await proxy.close()
        await client.close()
    plain, streamed = mock.bodies()
    for body in (plain, streamed):
        assert body["messages"] == [U1]
        assert {k: body.get(k) for k in [*run, "model"]} == {**run, "model": "mock-model"}, body
    assert "stream" not in plain and streamed["stream"] is True
    assert streamed["stream_options"] == {"include_usage": True}  # the proxy needs the usage chunk
    assert r.calls[0].prompt_tokens == len(toy_render([U1]))  # the mock served model "mock-model"
    assert len(r.calls) == 2


async def test_proxy_forwards_tool_calls(mock_server: Callable[..., MockServer]) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}
    mock = mock_server("script", "--tokens", script=[{"tool_calls": [call]}])
    client, proxy, r = await _proxy_rollout(mock.base_url)
    try:
        oa = openai.AsyncOpenAI(base_url=r.base_url, api_key="x")
        tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
        resp = await oa.chat.completions.create(model="m", messages=[U1], tools=tools)
        stream = await oa.chat.completions.create(model="m", messages=[U1], tools=tools, stream=True)
        names = [tc.function.name async for c in stream if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    finally:
        await proxy.close()
        await client.close()
    assert resp.choices[0].message.tool_calls[0].function.name == "search"
    assert names == ["search"]
    assert r.calls[1].message["tool_calls"][0]["function"]["arguments"] == '{"q": "x"}'


async def test_proxy_rejects_unknown_rollouts_and_bad_json(token_mock: MockServer) -> None:
    import aiohttp

    client, proxy, r = await _proxy_rollout(token_mock.base_url)
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(proxy.url_for("nope") + "/chat/completions", json={"messages": []}) as resp:
                assert resp.status == 404
            async with s.post(r.base_url + "/chat/completions", data=b"{not json") as resp:
                assert resp.status == 400
                assert "malformed" in (await resp.json())["error"]["message"]
    finally:
        await proxy.close()
        await client.close()
    assert r.calls == []


# -- end to end through the CLI ---------------------------------------------------------------------
AGENT = '''
import sys
from openai import OpenAI
client = OpenAI()
prompt = sys.stdin.read()
msgs = [{"role": "user", "content": prompt}]
r = client.chat.completions.create(model="x", messages=msgs)
msgs += [{"role": "assistant", "content": r.choices[0].message.content}, {"role": "user", "content": "sure?"}]
stream = client.chat.completions.create(model="x", messages=msgs, stream=True)
print("".join(c.choices[0].delta.content or "" for c in stream if c.choices))
'''


def _agent_script(tmp_path: Path, name: str, code: str) -> Path:
    """An agent program's file in a project folder others may read, as usual (pytest's own are 0700)."""
    folder = tmp_path / "agents"
    folder.mkdir(mode=0o755, exist_ok=True)
    path = folder / name
    path.write_text(code)
    return path


def test_program_agent_is_recorded(tmp_path: Path, mock_server: Callable[..., MockServer],
                                   cli: Callable[..., CliResult], store_path: Path,
                                   write_env: Callable[..., Path]) -> None:
    agent = _agent_script(tmp_path, "agent.py", AGENT)
    env = write_env(f'''
        import workbench as wb
        def load_environment():
            rubric = wb.Rubric()
            @rubric.reward
            def echoed(completion: str) -> float:
                return float(completion == "sure?")
            return wb.Environment(name="agent", tasks=wb.TaskSet.from_records([{{"prompt": "hello there"}}]),
                                  harness=wb.Program([{sys.executable!r}, {str(agent)!r}]), rubric=rubric)
        ''')
    mock = mock_server("echo", "--tokens")
    res = cli("eval", env, "--base-url", mock.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    summary = last_json(res.stdout)
    assert summary["errors"] == 0 and summary["rewards"]["echoed"] == 1.0
    assert summary["metrics"]["token_mismatch"] == 0.0
    db = sqlite3.connect(store_path)
    (calls,) = db.execute("SELECT COUNT(*) FROM model_call").fetchone()
    assert calls == 2
    nodes, ids, lps, mask = db.execute("SELECT nodes, token_ids, logprobs, mask FROM trace").fetchone()
    t = Trace.unpack(nodes, ids, lps, mask)
    [branch] = t.branches()
    got, _, m = t.sequence(branch)
    first = {"role": "user", "content": "hello there"}
    expected = toy_render([first, {"role": "assistant", "content": "hello there"},
                           {"role": "user", "content": "sure?"}]) + _completion({"content": "sure?"})
    assert got == expected and sum(m) == len(_completion(first)) + len(_completion({"content": "sure?"}))
    state = db.execute("SELECT state FROM rollout").fetchone()[0]
    assert '"exit_code":0' in state


@pytest.mark.parametrize("drift", [False, True])
def test_multi_turn_mismatch_metric(drift: bool, mock_server: Callable[..., MockServer],
                                    cli: Callable[..., CliResult], write_env: Callable[..., Path]) -> None:
    env = write_env('''
        import workbench as wb
        class Chat(wb.MultiTurn):
            async def respond(self, messages, state):
                return [{"role": "user", "content": "and then what"}]
        def load_environment():
            rubric = wb.Rubric()
            @rubric.metric
            def turns(messages: list) -> float:
                return float(len(messages))
            return wb.Environment(name="chat", tasks=wb.TaskSet.from_records([{"prompt": "tell me a story"}]),
                                  harness=Chat(max_turns=3), rubric=rubric)
        ''')
    mock = mock_server("echo", "--tokens", *(["--drift"] if drift else []))
    res = cli("eval", env, "--base-url", mock.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    metrics = last_json(res.stdout)["metrics"]
    assert metrics["turns"] == 6.0
    assert metrics["token_mismatch"] == (2.0 if drift else 0.0)


@pytest.mark.parametrize("drift", [False, True])
def test_validate_with_model_fails_loudly_on_token_mismatch(drift: bool, mock_server: Callable[..., MockServer],
                                                             cli: Callable[..., CliResult],
                                                             write_env: Callable[..., Path]) -> None:
    env = write_env(CHAT_ENV)
    mock = mock_server("echo", "--tokens", *(["--drift"] if drift else []))
    res = cli("validate", env, "-m", "mock-model", "--base-url", mock.base_url, "--json")
    report = last_json(res.stdout)
    assert report["tokens"]["traced"] == 3
    if drift:
        assert res.rc == 1
        assert report["tokens"]["mismatches"] == 3
        assert "turn 2's prompt tokens do not extend turn 1's tokens" in report["problems"][0]
    else:
        assert res.rc == 0, res.stderr
        assert report["tokens"]["mismatches"] == 0 and report["ok"]


SNOOP = r'''
import json, os, socket, sys, urllib.request
found = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            data = open("/proc/%s/environ" % pid, "rb").read()
        except OSError:
            continue
        if b"WB_PARENT_SECRET" in data:
            found.append(pid)
mock_port = int(sys.argv[1])
try:
    socket.create_connection(("127.0.0.1", mock_port), timeout=2).close()
    direct = "reached"
except OSError:
    direct = "blocked"
url = os.environ["OPENAI_BASE_URL"] + "/chat/completions"
body = json.dumps({"model": "x", "messages": [{"role": "user", "content": sys.stdin.read()}]}).encode()
req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json",
                                                      "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
reply = json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["message"]["content"]
print(json.dumps({"found": found, "direct": direct, "key": os.environ["OPENAI_API_KEY"], "reply": reply}))
'''


@pytest.mark.parametrize("runtime", ["local", "docker"])
def test_an_agent_program_sees_neither_the_parents_secrets_nor_the_network(
        runtime: str, mock_server: Callable[..., MockServer], cli: Callable[..., CliResult],
        cli_env: dict[str, str], write_env: Callable[..., Path]) -> None:
    """The program runs in the rollout's sandbox: its own PID namespace (the parent's /proc/PID/environ,
    which holds the real key, is not there), no network but the interception proxy."""
    mock = mock_server("echo")
    env = write_env(f'''
        import json
        import workbench as wb
        def load_environment():
            rubric = wb.Rubric()
            @rubric.reward
            def isolated(state: dict) -> dict:
                seen = json.loads(state["stdout"])
                return {{"no_parent_env": float(seen["found"] == []), "no_network": float(seen["direct"] == "blocked"),
                        "placeholder_key": float(seen["key"] == "workbench-proxy"),
                        "proxied": float(seen["reply"] == "hello sandbox")}}
            return wb.Environment(name="snoop", tasks=wb.TaskSet.from_records([{{"prompt": "hello sandbox"}}]),
                                  harness=wb.Program(["python3", "-c", {SNOOP!r}, "{mock.port}"]), rubric=rubric)
        ''')
    res = cli("eval", env, "--base-url", mock.base_url, "-m", "mock-model", "--runtime", runtime,
              "--api-key", "sk-real-key-1234567890", "--json",
              env={**cli_env, "WB_PARENT_SECRET": "do-not-leak", "OPENAI_API_KEY": "sk-real-key-1234567890"})
    assert res.rc == 0, res.stderr
    s = last_json(res.stdout)
    assert s["errors"] == 0, s
    assert s["rewards"] == {"isolated.no_parent_env": 1.0, "isolated.no_network": 1.0,
                            "isolated.placeholder_key": 1.0, "isolated.proxied": 1.0}, s


NAIVE_STREAM = r'''
import json, sys
from openai import OpenAI
client = OpenAI()
prompt = sys.stdin.read()
msgs = [{"role": "user", "content": prompt}]
text = "".join(chunk.choices[0].delta.content or ""  # no guard: every chunk has a choice, as the harness asked
               for chunk in client.chat.completions.create(model="x", messages=msgs, stream=True))
usage = [c.usage.completion_tokens for c in client.chat.completions.create(
    model="x", messages=msgs, stream=True, stream_options={"include_usage": True}) if c.usage]
print(json.dumps({"text": text, "usage": usage}))
'''


def test_a_naive_streaming_loop_gets_the_stream_it_asked_for(tmp_path: Path, mock_server: Callable[..., MockServer],
                                                             cli: Callable[..., CliResult], store_path: Path,
                                                             write_env: Callable[..., Path]) -> None:
    """The proxy asks upstream for the usage it records, and strips the usage chunk (empty choices) from what
    the harness gets unless the harness asked for it itself."""
    agent = _agent_script(tmp_path, "naive.py", NAIVE_STREAM)
    env = write_env(f'''
        import json
        import workbench as wb
        def load_environment():
            rubric = wb.Rubric()
            @rubric.reward
            def streamed(state: dict) -> dict:
                out = json.loads(state["stdout"])
                return {{"text": float(out["text"] == "hello there"), "usage": float(len(out["usage"]) == 1)}}
            return wb.Environment(name="naive", tasks=wb.TaskSet.from_records([{{"prompt": "hello there"}}]),
                                  harness=wb.Program([{sys.executable!r}, {str(agent)!r}]), rubric=rubric)
        ''')
    mock = mock_server("echo", "--tokens")
    res = cli("eval", env, "--base-url", mock.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    s = last_json(res.stdout)
    assert s["errors"] == 0 and s["rewards"] == {"streamed.text": 1.0, "streamed.usage": 1.0}, s
    db = sqlite3.connect(store_path)
    usage = db.execute("SELECT prompt_tokens, completion_tokens FROM model_call ORDER BY id").fetchall()
    assert len(usage) == 2 and all(p > 0 and c > 0 for p, c in usage), "both calls' usage is recorded"


async def test_the_proxy_answers_a_models_lookup_by_any_name(token_mock: MockServer) -> None:
    """Agent SDKs look their model up before calling it; every name is the run's model behind the proxy."""
    client, proxy, r = await _proxy_rollout(token_mock.base_url)
    try:
        oa = openai.AsyncOpenAI(base_url=r.base_url, api_key="anything")
        got = await oa.models.retrieve("gpt-whatever")
        assert got.id == "gpt-whatever" and got.owned_by == "workbench-proxy"
        assert [m.id for m in (await oa.models.list()).data] == ["mock-model"]
        stranger = openai.AsyncOpenAI(base_url=proxy.url_for("nope"), api_key="anything")
        with pytest.raises(openai.NotFoundError):
            await stranger.models.retrieve("gpt-whatever")
    finally:
        await proxy.close()
        await client.close()
