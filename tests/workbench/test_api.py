"""The public authoring API as a specification: tasks, task sets, rubrics, tools and harnesses.

Harness tests talk to the real mock model server over HTTP through Workbench's own client.
"""

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, Optional

import pytest

import workbench as wb
from tests.helpers import MockServer
from workbench.authoring.rubric import ROLLOUT_ARGS, Scores
from workbench.errors import EnvLoadError, RubricError
from workbench.records.model_reply import ModelError
from workbench.records.rollout import Rollout, Usage
from workbench.rollouts.client import ChatClient, classify_status, parse_chat_body


# -- Task ---------------------------------------------------------------------------------------
def test_task_id_is_a_stable_content_hash() -> None:
    a = wb.Task("What is 2 + 2?", answer="4", info={"x": 1, "y": [1, 2]})
    b = wb.Task("What is 2 + 2?", answer="4", info={"y": [1, 2], "x": 1})  # key order does not matter
    assert a.id and a.id == b.id
    assert wb.Task("What is 2 + 2?", answer="5", info={"x": 1, "y": [1, 2]}).id != a.id
    assert wb.Task("What is 2 + 3?", answer="4", info={"x": 1, "y": [1, 2]}).id != a.id
    assert wb.Task("What is 2 + 2?", answer="4", info={"x": 2, "y": [1, 2]}).id != a.id
    chat = [{"role": "user", "content": "What is 2 + 2?"}]
    assert wb.Task(chat, answer="4").id == wb.Task([dict(m) for m in chat], answer="4").id


def test_task_explicit_id_is_kept() -> None:
    assert wb.Task("q", answer="a", id="task-7").id == "task-7"
    assert wb.TaskSet.from_records([{"prompt": "q", "id": 12}])[0].id == "12"


def test_task_rejects_a_prompt_that_is_not_text_or_messages() -> None:
    with pytest.raises(TypeError):
        wb.Task(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        wb.Task([{"content": "no role"}])


# -- TaskSet ------------------------------------------------------------------------------------
def test_from_records_builds_tasks_and_keeps_extra_fields_in_info() -> None:
    ts = wb.TaskSet.from_records(
        [{"prompt": "p0", "answer": "a0", "level": 3}, {"question": "p1", "answer": "a1", "info": {"k": "v"}}],
        name="demo")
    tasks = list(ts)
    assert ts.name == "demo" and len(ts) == 2
    assert [t.prompt for t in tasks] == ["p0", "p1"]
    assert [t.answer for t in tasks] == ["a0", "a1"]
    assert tasks[0].info == {"level": 3} and tasks[1].info == {"k": "v"}
    assert list(ts) == tasks  # re-iterable


def test_from_records_without_a_prompt_is_an_env_load_error() -> None:
    with pytest.raises(EnvLoadError, match="prompt"):
        list(wb.TaskSet.from_records([{"answer": "x"}]))


def test_from_jsonl_reads_rows_and_skips_blank_lines(tmp_path: Path) -> None:
    p = tmp_path / "tasks.jsonl"
    p.write_text('{"prompt": "a", "answer": "1"}\n\n{"prompt": "b", "answer": "2"}\n')
    ts = wb.TaskSet.from_jsonl(p)
    assert ts.name == "tasks"
    assert [(t.prompt, t.answer) for t in ts] == [("a", "1"), ("b", "2")]


def test_from_jsonl_bad_line_names_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "broken.jsonl"
    p.write_text('{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": oops}\n')
    ts = wb.TaskSet.from_jsonl(p)
    with pytest.raises(EnvLoadError) as ei:
        list(ts)
    assert f"{p}:3" in str(ei.value)


def test_from_jsonl_missing_file(tmp_path: Path) -> None:
    with pytest.raises(EnvLoadError, match="does not exist"):
        wb.TaskSet.from_jsonl(tmp_path / "nope.jsonl")


class CountingSource:
    """A task source that records every task it yields."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.reads: list[int] = []

    def __call__(self) -> Iterator[wb.Task]:
        for i in range(self.n):
            self.reads.append(i)
            yield wb.Task(f"q{i}", answer=str(i))


def test_slicing_filter_map_shuffle_do_not_read_until_iterated() -> None:
    src = CountingSource(20)
    ts = wb.TaskSet(src, name="counted")
    derived = [ts[2:5], ts.take(3), ts.filter(lambda t: int(t.answer) % 2 == 0),
               ts.map(lambda t: wb.Task(t.prompt.upper(), answer=t.answer)), ts.shuffle(seed=1),
               ts.shuffle(seed=1)[:4].filter(lambda t: True)]
    assert src.reads == [], "building derived task sets must not read the source"
    assert all(isinstance(d, wb.TaskSet) and d.name == "counted" for d in derived)

    assert [t.prompt for t in derived[0]] == ["q2", "q3", "q4"]
    assert src.reads == [0, 1, 2, 3, 4], "a slice reads only as far as it needs"


def test_slice_filter_map_results() -> None:
    ts = wb.TaskSet(CountingSource(10))
    assert [t.answer for t in ts[7:]] == ["7", "8", "9"]
    assert [t.answer for t in ts[::4]] == ["0", "4", "8"]
    assert [t.answer for t in ts[-2:]] == ["8", "9"]
    assert ts[3].prompt == "q3" and ts[-1].prompt == "q9"  # type: ignore[union-attr]
    with pytest.raises(IndexError):
        ts[10]  # noqa: B018
    assert [t.answer for t in ts.filter(lambda t: int(t.answer) % 3 == 0)] == ["0", "3", "6", "9"]
    assert [t.prompt for t in ts.map(lambda t: wb.Task(t.prompt + "!", answer=t.answer))[:2]] == ["q0!", "q1!"]
    assert len(ts.filter(lambda t: t.answer in {"1", "2"})) == 2


def test_shuffle_is_deterministic_by_seed_and_keeps_every_task() -> None:
    ts = wb.TaskSet(CountingSource(30))
    a = [t.id for t in ts.shuffle(seed=7)]
    b = [t.id for t in ts.shuffle(seed=7)]
    c = [t.id for t in ts.shuffle(seed=8)]
    original = [t.id for t in ts]
    assert a == b
    assert a != c
    assert a != original
    assert sorted(a) == sorted(original) == sorted(c)


def test_len_materialises_the_source_once() -> None:
    src = CountingSource(5)
    ts = wb.TaskSet(src)
    assert len(ts) == 5 and len(ts) == 5
    list(ts)
    assert src.reads == [0, 1, 2, 3, 4]


# -- Rubric: injection --------------------------------------------------------------------------
def _ctx() -> dict[str, Any]:
    """A score context in which every injectable name maps to a distinct object."""
    return {name: object() for name in ROLLOUT_ARGS}


@pytest.mark.parametrize("arg", sorted(ROLLOUT_ARGS))
async def test_reward_gets_each_allowed_argument_by_name(arg: str) -> None:
    ctx = _ctx()
    seen: dict[str, Any] = {}
    rubric = wb.Rubric()
    ns: dict[str, Any] = {"seen": seen}
    exec(f"def probe({arg}):\n    seen['v'] = {arg}\n    return 1.0", ns)  # a reward asking for exactly `arg`
    rubric.reward(ns["probe"])
    s = await rubric.score_rollout(ctx)
    assert s.errors == []
    assert seen["v"] is ctx[arg]


async def test_injected_values_from_a_real_rollout() -> None:
    task = wb.Task("What is 1 + 1?", answer="2", info={"level": 1})
    r = Rollout(id="r.0.0", task=task, sample_index=0, client=None, base_url="", model="m",  # type: ignore[arg-type]
                params={})
    r.messages = [{"role": "user", "content": "What is 1 + 1?"}, {"role": "assistant", "content": "It is 2"}]
    r.state["k"] = "v"
    got: dict[str, Any] = {}
    rubric = wb.Rubric()

    @rubric.reward
    def everything(prompt: Any, completion: Any, messages: Any, answer: Any, info: Any, task: Any, state: Any,
                   trace: Any, sandbox: Any, usage: Any) -> float:
        got.update(locals())
        return 1.0

    s = await rubric.score_rollout(r.score_context())
    assert s.errors == [] and s.rewards == {"everything": 1.0}
    assert got["prompt"] == "What is 1 + 1?"
    assert got["completion"] == "It is 2"
    assert got["messages"] == r.messages
    assert got["answer"] == "2" and got["info"] == {"level": 1} and got["task"] is task
    assert got["state"] == {"k": "v"} and got["trace"] is r and got["sandbox"] is None
    assert isinstance(got["usage"], Usage)


def test_unknown_argument_is_rejected_at_registration() -> None:
    rubric = wb.Rubric()
    with pytest.raises(RubricError) as ei:

        @rubric.reward
        def my_reward(completion: str, answr: str) -> float:
            return 0.0

    msg = str(ei.value)
    assert "my_reward" in msg and "answr" in msg
    assert rubric.functions == []


def test_group_reward_cannot_ask_for_a_per_rollout_name() -> None:
    rubric = wb.Rubric()
    with pytest.raises(RubricError) as ei:

        @rubric.group_reward
        def shortest(completion: str) -> list[float]:
            return []

    assert "shortest" in str(ei.value) and "completion" in str(ei.value)


def test_duplicate_function_names_are_rejected() -> None:
    rubric = wb.Rubric()
    rubric.reward(lambda completion: 1.0, name="same")
    with pytest.raises(RubricError, match="same"):
        rubric.metric(lambda completion: 1.0, name="same")


async def test_parameters_with_defaults_are_allowed_and_keep_their_default() -> None:
    rubric = wb.Rubric()

    @rubric.reward
    def scaled(completion: str, scale: float = 3.0) -> float:
        return scale * len(completion)

    s = await rubric.score_rollout({**_ctx(), "completion": "ab"})
    assert s.rewards == {"scaled": 6.0} and s.total == 6.0


async def test_var_kwargs_receives_every_argument() -> None:
    rubric = wb.Rubric()
    got: dict[str, Any] = {}

    @rubric.reward
    def greedy(**kwargs: Any) -> float:
        got.update(kwargs)
        return 0.5

    ctx = _ctx()
    await rubric.score_rollout(ctx)
    assert set(got) == set(ROLLOUT_ARGS)
    assert all(got[k] is ctx[k] for k in ctx)


async def test_async_rewards_are_awaited() -> None:
    rubric = wb.Rubric()

    @rubric.reward
    async def slow(completion: str) -> float:
        await asyncio.sleep(0)
        return 0.75

    @rubric.metric
    async def slow_metric(completion: str) -> float:
        await asyncio.sleep(0)
        return 2.0

    s = await rubric.score_rollout({"completion": "x"})
    assert s.rewards == {"slow": 0.75} and s.metrics == {"slow_metric": 2.0} and s.total == 0.75


async def test_dict_returns_become_named_entries_that_all_count() -> None:
    rubric = wb.Rubric()

    @rubric.reward(weight=2.0)
    def parts(completion: str) -> dict[str, float]:
        return {"format": 1.0, "content": 0.25}

    @rubric.metric
    def stats(completion: str) -> dict[str, float]:
        return {"len": 3.0}

    s = await rubric.score_rollout({"completion": "abc"})
    assert s.rewards == {"parts.format": 1.0, "parts.content": 0.25}
    assert s.metrics == {"stats.len": 3.0}
    assert s.total == pytest.approx(2.0 * 1.25)


async def test_an_exception_is_recorded_and_does_not_propagate() -> None:
    rubric = wb.Rubric()

    @rubric.reward
    def good(completion: str) -> float:
        return 1.0

    @rubric.reward
    def broken(completion: str) -> float:
        raise ValueError("cannot parse this")

    @rubric.reward
    def not_a_number(completion: str) -> Any:
        return "high"

    s = await rubric.score_rollout({"completion": "x"})
    assert s.rewards == {"good": 1.0} and s.total == 1.0
    errors = dict(s.errors)
    assert set(errors) == {"broken", "not_a_number"}
    assert "ValueError" in errors["broken"] and "cannot parse this" in errors["broken"]


async def test_weights_apply_to_the_total_and_rewards_stay_raw() -> None:
    rubric = wb.Rubric()
    rubric.reward(lambda completion: 1.0, weight=0.5, name="a")
    rubric.reward(lambda completion: 0.25, weight=2.0, name="b")
    rubric.reward(lambda completion: 1.0, weight=0.0, name="c")
    s = await rubric.score_rollout({"completion": ""})
    assert s.rewards == {"a": 1.0, "b": 0.25, "c": 1.0}
    assert s.total == pytest.approx(0.5 * 1.0 + 2.0 * 0.25)


async def test_metrics_do_not_count_toward_the_total() -> None:
    rubric = wb.Rubric()
    rubric.reward(lambda completion: 1.0, name="r")
    rubric.metric(lambda completion: 100.0, name="m")
    s = await rubric.score_rollout({"completion": ""})
    assert s.metrics == {"m": 100.0} and "m" not in s.rewards
    assert s.total == 1.0


# -- Rubric: group rewards ----------------------------------------------------------------------
async def test_group_reward_sees_plural_args_and_per_rollout_totals() -> None:
    rubric = wb.Rubric()
    rubric.reward(lambda completion, answer: float(completion == answer), name="correct", weight=2.0)
    seen: dict[str, Any] = {}

    @rubric.group_reward(weight=0.5)
    def shortest_correct(completions: list[str], answers: list[str], rewards: list[float], answer: str,
                         infos: list[dict[str, Any]]) -> list[float]:
        seen.update(completions=completions, answers=answers, rewards=list(rewards), answer=answer, infos=infos)
        best = min((len(c) for c, r in zip(completions, rewards, strict=True) if r > 0), default=None)
        return [1.0 if r > 0 and len(c) == best else 0.0 for c, r in zip(completions, rewards, strict=True)]

    completions = ["4", "four", "5"]
    ctxs = [{"completion": c, "answer": "4", "info": {"i": i}} for i, c in enumerate(completions)]
    scores = [await rubric.score_rollout(c) for c in ctxs]
    assert [s.total for s in scores] == [2.0, 0.0, 0.0]
    await rubric.score_group(ctxs, scores)

    assert seen["completions"] == completions
    assert seen["answers"] == ["4", "4", "4"] and seen["answer"] == "4"
    assert seen["infos"] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert seen["rewards"] == [2.0, 0.0, 0.0], "rewards are the per-rollout weighted totals"
    assert [s.rewards["shortest_correct"] for s in scores] == [1.0, 0.0, 0.0]
    assert [s.total for s in scores] == [2.5, 0.0, 0.0], "group rewards are folded in with their weight"


async def test_async_group_reward_with_dict_values() -> None:
    rubric = wb.Rubric()

    @rubric.group_reward(weight=1.0)
    async def rank(completions: list[str]) -> list[dict[str, float]]:
        await asyncio.sleep(0)
        return [{"first": float(i == 0), "n": float(len(completions))} for i in range(len(completions))]

    ctxs = [{"completion": "a"}, {"completion": "b"}]
    scores = [Scores(), Scores()]
    await rubric.score_group(ctxs, scores)
    assert scores[0].rewards == {"rank.first": 1.0, "rank.n": 2.0} and scores[0].total == 3.0
    assert scores[1].rewards == {"rank.first": 0.0, "rank.n": 2.0} and scores[1].total == 2.0


@pytest.mark.parametrize("bad", [[1.0], [1.0, 1.0, 1.0], 1.0, {"a": 1.0}])
async def test_group_reward_returning_the_wrong_shape_is_recorded_as_an_error(bad: Any) -> None:
    rubric = wb.Rubric()
    rubric.group_reward(lambda completions: bad, name="wrong")
    ctxs = [{"completion": "a"}, {"completion": "b"}]
    scores = [Scores(total=1.0), Scores(total=0.0)]
    await rubric.score_group(ctxs, scores)
    for s in scores:
        assert [name for name, _ in s.errors] == ["wrong"]
        assert "wrong" not in s.rewards
    assert [s.total for s in scores] == [1.0, 0.0]


async def test_group_reward_that_raises_is_recorded_on_every_rollout() -> None:
    rubric = wb.Rubric()

    def explode(completions: list[str]) -> list[float]:
        raise RuntimeError("group boom")

    rubric.group_reward(explode)
    scores = [Scores(), Scores()]
    await rubric.score_group([{"completion": "a"}, {"completion": "b"}], scores)
    assert all(s.errors and "group boom" in s.errors[0][1] for s in scores)


# -- Tool schemas -------------------------------------------------------------------------------
def search(query: str, k: int = 3, mode: Literal["fast", "exact"] = "fast", ids: list[int] | None = None,
           weight: Optional[float] = None, tags: list[str] = [], verbose: bool = False,  # noqa: B006, UP045
           sandbox: Any = None, state: Any = None) -> str:
    """Search the corpus for documents.

    Longer explanation that is still part of the description.

    Args:
        query: What to look for.
        k: How many results
            to return.
        mode: Matching mode.

    Returns:
        The matching documents.
    """
    return query


def test_tool_schema_from_signature_and_docstring() -> None:
    tool = wb.Tool.from_function(search)
    schema = tool.schema()
    assert schema["type"] == "function"
    fn = schema["function"]
    assert fn["name"] == "search"
    assert fn["description"].startswith("Search the corpus for documents.")
    assert "Returns" not in fn["description"] and "What to look for" not in fn["description"]
    params = fn["parameters"]
    assert params["type"] == "object"
    props = params["properties"]
    assert props["query"] == {"type": "string", "description": "What to look for."}
    assert props["k"]["type"] == "integer" and props["k"]["default"] == 3
    assert props["k"]["description"] == "How many results to return."
    assert props["mode"]["enum"] == ["fast", "exact"] and props["mode"]["type"] == "string"
    assert props["mode"]["description"] == "Matching mode."
    assert props["ids"]["type"] == "array" and props["ids"]["items"] == {"type": "integer"}
    assert props["weight"]["type"] == "number"
    assert props["tags"]["type"] == "array" and props["tags"]["items"] == {"type": "string"}
    assert props["verbose"]["type"] == "boolean"
    assert params["required"] == ["query"], "parameters with defaults are not required"
    assert "sandbox" not in props and "state" not in props
    assert set(tool.injected) == {"sandbox", "state"}


async def test_tool_call_injects_hidden_parameters() -> None:
    def note(text: str, state: dict[str, Any]) -> str:
        state.setdefault("notes", []).append(text)
        return "saved"

    tool = wb.Tool.from_function(note)
    assert list(tool.parameters["properties"]) == ["text"]
    state: dict[str, Any] = {}
    assert await tool.call({"text": "hi"}, {"state": state, "sandbox": None}) == "saved"
    assert state == {"notes": ["hi"]}


def test_tool_loop_rejects_two_tools_with_one_name() -> None:
    def dup() -> str:
        return ""

    with pytest.raises(EnvLoadError, match="dup"):
        wb.ToolLoop(tools=[dup, wb.Tool.from_function(dup)])


# -- Harnesses against the mock server ----------------------------------------------------------
def tool_call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


async def run_harness(harness: wb.Harness, base_url: str, prompt: str = "Please help.") -> Rollout:
    async with ChatClient(max_retries=0, request_timeout=60) as client:
        rollout = Rollout(id="t.0.0", task=wb.Task(prompt, answer="x"), sample_index=0, client=client,
                          base_url=base_url, model="mock-model", params={"max_tokens": 32})
        await asyncio.wait_for(harness.run(rollout), timeout=60)
    return rollout


async def test_tool_loop_calls_a_tool_and_returns_the_result_to_the_model(
        mock_server: Callable[..., MockServer]) -> None:
    server = mock_server("script", script=[{"tool_calls": [tool_call("c1", "add", a=2, b=3)]}, "The sum is 5"])
    calls: list[tuple[int, int]] = []

    def add(a: int, b: int) -> int:
        """Add two integers."""
        calls.append((a, b))
        return a + b

    rollout = await run_harness(wb.ToolLoop(tools=[add], system_prompt="Use tools."), server.base_url)
    assert calls == [(2, 3)]
    roles = [m["role"] for m in rollout.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert rollout.messages[2]["tool_calls"][0]["id"] == "c1"
    assert rollout.messages[3] == {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "5"}
    assert rollout.completion == "The sum is 5"
    assert rollout.turns == 2 and len(rollout.calls) == 2
    assert rollout.calls[1].n_messages == 4, "the second call sends the tool result"
    assert rollout.errors == []
    assert server.requests() == 2


async def test_tool_loop_runs_parallel_tool_calls_concurrently(mock_server: Callable[..., MockServer]) -> None:
    # Each tool waits for an event only the other one sets: run one after the other, they cannot finish.
    ping_seen, pong_seen = asyncio.Event(), asyncio.Event()

    async def ping() -> str:
        ping_seen.set()
        await asyncio.wait_for(pong_seen.wait(), timeout=10)
        return "ping done"

    async def pong() -> str:
        pong_seen.set()
        await asyncio.wait_for(ping_seen.wait(), timeout=10)
        return "pong done"

    server = mock_server("script", script=[{"tool_calls": [tool_call("c1", "ping"), tool_call("c2", "pong")]},
                                           "both finished"])
    rollout = await run_harness(wb.ToolLoop(tools=[ping, pong]), server.base_url)
    tool_msgs = [m for m in rollout.messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_msgs] == [("c1", "ping done"), ("c2", "pong done")]
    assert rollout.completion == "both finished"
    assert rollout.errors == []


async def test_a_raising_tool_returns_an_error_message_and_the_rollout_continues(
        mock_server: Callable[..., MockServer]) -> None:
    def divide(a: float, b: float) -> float:
        return a / b

    server = mock_server("script", script=[{"tool_calls": [tool_call("c1", "divide", a=1, b=0)]},
                                           {"tool_calls": [tool_call("c2", "divide", a=6, b=3)]}, "It is 2"])
    rollout = await run_harness(wb.ToolLoop(tools=[divide]), server.base_url)
    tool_msgs = [m for m in rollout.messages if m["role"] == "tool"]
    assert tool_msgs[0]["content"].startswith("Error:")
    assert "ZeroDivisionError" in tool_msgs[0]["content"]
    assert tool_msgs[1]["content"] == "2.0"
    assert rollout.completion == "It is 2"
    assert [e.kind for e in rollout.errors] == ["tool"] and rollout.failure is None


async def test_a_tool_output_over_the_cap_is_cut_and_recorded(mock_server: Callable[..., MockServer]) -> None:
    def flood() -> str:
        return "x" * 5_000_000

    server = mock_server("script", script=[{"tool_calls": [tool_call("c1", "flood")]}, "done"])
    rollout = await run_harness(wb.ToolLoop(tools=[flood], max_tool_output=1000), server.base_url)
    [msg] = [m for m in rollout.messages if m["role"] == "tool"]
    assert msg["content"].startswith("x" * 1000) and len(msg["content"]) < 1100
    assert "output cut: 5,000,000 characters" in msg["content"]
    assert [e.kind for e in rollout.errors] == ["tool"] and "5,000,000" in rollout.errors[0].message
    with pytest.raises(EnvLoadError, match="max_tool_output"):
        wb.ToolLoop(tools=[flood], max_tool_output=0)


async def test_unknown_tool_and_bad_arguments_are_reported_to_the_model(
        mock_server: Callable[..., MockServer]) -> None:
    def lookup(key: str) -> str:
        return key.upper()

    bad_args = {"id": "c2", "type": "function", "function": {"name": "lookup", "arguments": "{not json"}}
    server = mock_server("script", script=[{"tool_calls": [tool_call("c1", "fetch", key="a")]},
                                           {"tool_calls": [bad_args]}, "done"])
    rollout = await run_harness(wb.ToolLoop(tools=[lookup]), server.base_url)
    tool_msgs = [m for m in rollout.messages if m["role"] == "tool"]
    assert tool_msgs[0]["content"].startswith("Error:")
    assert "fetch" in tool_msgs[0]["content"] and "lookup" in tool_msgs[0]["content"]
    assert tool_msgs[1]["content"].startswith("Error:")
    assert rollout.completion == "done"
    assert [e.kind for e in rollout.errors] == ["tool", "tool"]


@pytest.mark.parametrize("mock_url", [{"mode": "script", "script": [{"tool_calls": [tool_call("c", "noop")]}]}],
                         indirect=True)  # the model never stops calling the tool
async def test_tool_loop_stops_at_max_turns(mock_url: str) -> None:
    def noop() -> str:
        return "ok"

    rollout = await run_harness(wb.ToolLoop(tools=[noop], max_turns=3), mock_url)
    assert rollout.turns == 3
    assert rollout.state.get("max_turns_reached") is True


class Guessing(wb.MultiTurn):
    """A scripted game: feedback twice, then the episode ends (respond returns None)."""

    async def setup(self, task: Any, state: dict[str, Any]) -> None:
        state["round"] = 0

    async def respond(self, messages: list[dict[str, Any]], state: dict[str, Any]) -> list[dict[str, Any]] | None:
        state["round"] += 1
        state.setdefault("saw", []).append(messages[-1]["content"])
        if state["round"] >= 3:
            return None
        return [{"role": "user", "content": f"feedback {state['round']}"}]


async def test_multiturn_scripted_respond_ends_with_none(mock_server: Callable[..., MockServer]) -> None:
    server = mock_server("echo")
    rollout = await run_harness(Guessing(max_turns=10), server.base_url, prompt="guess a word")
    assert [(m["role"], m["content"]) for m in rollout.messages] == [
        ("user", "guess a word"), ("assistant", "guess a word"),
        ("user", "feedback 1"), ("assistant", "feedback 1"),
        ("user", "feedback 2"), ("assistant", "feedback 2"),
    ]
    assert rollout.turns == 3
    assert rollout.state["saw"] == ["guess a word", "feedback 1", "feedback 2"]
    assert "max_turns_reached" not in rollout.state


async def test_multiturn_stops_at_max_turns(mock_url: str) -> None:
    class Forever(wb.MultiTurn):
        async def respond(self, messages: list[dict[str, Any]], state: dict[str, Any]) -> list[dict[str, Any]]:
            return [{"role": "user", "content": "again"}]

    rollout = await run_harness(Forever(max_turns=2), mock_url)
    assert rollout.turns == 2
    assert rollout.state["max_turns_reached"] is True


@pytest.mark.parametrize("mock_url", ["echo"], indirect=True)
async def test_single_turn_with_system_prompt(mock_url: str) -> None:
    rollout = await run_harness(wb.SingleTurn(system_prompt="Be brief."), mock_url, prompt="hello there")
    assert rollout.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello there"},
                                {"role": "assistant", "content": "hello there"}]
    assert rollout.usage.prompt_tokens > 0 and rollout.usage.completion_tokens > 0


@pytest.mark.parametrize("body", [b"", b"not json", b"[1, 2]", b'{"choices": []}', b'{"choices": [{"x": 1}]}'],
                         ids=["empty", "malformed", "not-an-object", "no-choices", "no-message"])
def test_unusable_response_bodies_are_bad_response_errors(body: bytes) -> None:
    with pytest.raises(ModelError) as ei:
        parse_chat_body(body)
    assert ei.value.kind == "bad_response" and not ei.value.retryable


def test_response_parsing_keeps_usage_tool_calls_and_token_data() -> None:
    body = json.dumps({"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, "finish_reason": "tool_calls",
        "logprobs": {"content": []}}], "usage": {"prompt_tokens": 7, "completion_tokens": 2}}).encode()
    r = parse_chat_body(body)
    assert r.message["tool_calls"][0]["id"] == "c" and r.finish_reason == "tool_calls"
    assert (r.prompt_tokens, r.completion_tokens) == (7, 2)
    assert r.extra == {"logprobs": {"content": []}}


@pytest.mark.parametrize(("status", "kind", "retryable"), [
    (401, "auth", False), (403, "auth", False), (404, "unknown_model", False), (429, "rate_limit", True),
    (500, "server", True), (503, "server", True), (400, "bad_request", False)])
def test_http_statuses_are_classified(status: int, kind: str, retryable: bool) -> None:
    err = classify_status(status, b'{"error": {"message": "model x not found"}}', "x")
    assert err.kind == kind and err.retryable is retryable and err.status == status


@pytest.mark.parametrize("body", [
    {"error": {"message": "too long", "type": "invalid_request_error", "param": "messages",
               "code": "context_length_exceeded"}},  # OpenAI, and the embedded server
    {"error": {"message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
                          "(4000 in the messages, 1000 in the completion).", "type": "BadRequestError", "code": 400}},
], ids=["openai-code", "vllm-wording"])
def test_a_prompt_over_the_context_is_its_own_kind(body: dict[str, Any]) -> None:
    """Not retried, not fatal to the run: the rollout ends, saying why."""
    err = classify_status(400, json.dumps(body).encode(), "x")
    assert err.kind == "context_length" and not err.retryable and "context" in err.message
    assert classify_status(400, b'{"error": {"message": "bad temperature"}}', "x").kind == "bad_request"


def test_environment_validates_its_parts() -> None:
    tasks = wb.TaskSet.from_records([{"prompt": "q"}])
    with pytest.raises(EnvLoadError):
        wb.Environment(name="", tasks=tasks, harness=wb.SingleTurn())
    with pytest.raises(EnvLoadError):
        wb.Environment(name="x", tasks=[wb.Task("q")], harness=wb.SingleTurn())  # type: ignore[arg-type]
    with pytest.raises(EnvLoadError):
        wb.Environment(name="x", tasks=tasks, harness=object())  # type: ignore[arg-type]
    with pytest.raises(EnvLoadError):
        wb.Sampling(max_tokens=0)
