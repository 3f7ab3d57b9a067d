"""The bundled support_desk environment: its CRM MCP server on its own (through the official SDK's
client over stdio), its tasks against the seed data, its rubric on a real server's state, and a
scripted model run end to end through the workbench CLI."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import workbench_envs.support_desk as sd
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

import workbench as wb
from tests.helpers import last_json, query
from workbench.authoring.discovery import load

SEED = json.loads((Path(sd.__file__).parent / "crm_seed.json").read_text())


@asynccontextmanager
async def crm_session() -> AsyncIterator[ClientSession]:
    """A fresh CRM server process and an initialized SDK session to it."""
    params = StdioServerParameters(command=sys.executable, args=[str(sd.SERVER)])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


class Sessions:
    """What a reward receives as ``mcp``, over a real server: ``call`` (any tool the server lists) and
    ``["crm"]``, as the engine's."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    def __getitem__(self, name: str) -> ClientSession:
        assert name == "crm"
        return self.session

    async def call(self, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        res = await self.session.call_tool(tool, arguments or {})
        if res.is_error:
            raise wb.MCPToolError(res.content[0].text)
        return res.structured_content


def call(i: int, fn: str, **args: Any) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function", "function": {"name": fn, "arguments": json.dumps(args)}}


async def text(session: ClientSession, tool: str, **args: Any) -> tuple[bool, str, Any]:
    res = await session.call_tool(tool, args)
    return bool(res.is_error), res.content[0].text, res.structured_content


# -- the MCP server alone -----------------------------------------------------------------------------

async def test_server_lists_short_tools() -> None:
    async with crm_session() as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
    assert set(tools) == {*sd.MODEL_TOOLS, "get_order"}
    for t in tools.values():
        assert t.description and len(t.description) <= 40, t.description
        assert "title" not in json.dumps(t.input_schema)  # pydantic's generated titles are stripped
        assert t.input_schema["type"] == "object" and t.input_schema["required"]
    assert tools["issue_store_credit"].input_schema["properties"] == {
        "customer_id": {"type": "string"}, "amount": {"type": "number"}, "reason": {"type": "string"}}


async def test_find_list_and_search() -> None:
    async with crm_session() as s:
        err, txt, data = await text(s, "find_customer", email="Ben@Example.com ")
        assert not err and data == {"id": "C02", "name": "Ben Okafor", "tier": "gold", "store_credit": 0.0}
        assert txt == "C02 Ben Okafor, gold tier, store credit $0"
        err, txt, data = await text(s, "list_orders", customer_id="c02")
        assert not err and txt.splitlines() == ["A201 Running shoes $120: delivered 45 days ago",
                                                "A202 Yoga mat $35: delivered 5 days ago, final sale"]
        assert data["orders"][0] == {"id": "A201", "item": "Running shoes", "amount": 120.0, "status": "delivered",
                                     "days_ago": 45}
        _, txt, _ = await text(s, "list_orders", customer_id="C04")
        assert "A402 Mug $18: shipped" in txt.splitlines()
        _, txt, data = await text(s, "search_policy", query="gold tier refund window")
        assert "60 days" in data["results"][0] and len(data["results"]) <= 2
        _, txt, _ = await text(s, "search_policy", query="zzz")
        assert txt.startswith("No match")
        err, txt, _ = await text(s, "find_customer", email="nobody@example.com")
        assert err and "no customer" in txt


async def test_refund_changes_state_and_a_second_refund_is_refused() -> None:
    async with crm_session() as s:
        err, txt, data = await text(s, "issue_refund", order_id="A101", reason="unused")
        assert not err and txt == "Refunded $79 for order A101." and data["status"] == "refunded"
        _, _, order = await text(s, "get_order", order_id="a101")
        assert order["status"] == "refunded" and order["refund"] == {"amount": 79.0, "reason": "unused"}
        _, txt, _ = await text(s, "list_orders", customer_id="C01")
        assert "A101 Wireless headphones $79: refunded, delivered 10 days ago" in txt.splitlines()
        err, txt, _ = await text(s, "issue_refund", order_id="A101", reason="again")
        assert err and "already refunded" in txt
        err, txt, _ = await text(s, "issue_refund", order_id="A103", reason="seeded refund")  # refunded in the seed
        assert err and "already refunded" in txt
        err, txt, _ = await text(s, "issue_refund", order_id="Z999", reason="x")
        assert err and "no order" in txt
        err, txt, data = await text(s, "issue_store_credit", customer_id="C01", amount=15, reason="late return")
        assert not err and data["store_credit"] == 15.0
        _, _, cust = await text(s, "find_customer", email="ana@example.com")
        assert cust["store_credit"] == 15.0


async def test_bad_arguments_are_tool_errors() -> None:
    async with crm_session() as s:
        err, txt, _ = await text(s, "issue_store_credit", customer_id="C01", amount="lots", reason="x")
        assert err and "amount" in txt
        err, txt, _ = await text(s, "find_customer")
        assert err and "email" in txt
        err, txt, _ = await text(s, "issue_store_credit", customer_id="C01", amount=-5, reason="x")
        assert err and "positive" in txt
        assert not (await text(s, "find_customer", email="ana@example.com"))[0]  # the server is still up


@pytest.mark.slow  # two CRM server processes
async def test_each_server_process_has_its_own_state() -> None:
    async with crm_session() as a, crm_session() as b:
        assert not (await text(a, "issue_refund", order_id="A201", reason="x"))[0]
        assert (await text(b, "get_order", order_id="A201"))[2]["status"] == "delivered"
        assert not (await text(b, "issue_refund", order_id="A201", reason="x"))[0]  # b's own first refund
    async with crm_session() as c:
        assert (await text(c, "get_order", order_id="A201"))[2]["refund"] is None


# -- the tasks ------------------------------------------------------------------------------------------

def test_tasks_match_the_seed() -> None:
    env = load("support_desk")
    tasks = list(env.tasks)
    assert 20 <= len(tasks) <= 40 and len({t.id for t in tasks}) == len(tasks)
    assert [t.id for t in tasks] == [t.id for t in load("support_desk").tasks]
    kinds = [t.info["expected"] for t in tasks]
    assert {k: kinds.count(k) for k in sd.EXPECTED} == {"refund": 9, "store_credit": 5, "deny": 7, "policy_answer": 7}
    customers = {c["email"]: c for c in SEED["customers"]}
    orders = {o["id"]: o for o in SEED["orders"]}
    for t in tasks:
        info = t.info
        assert info["email"] in t.prompt and info["email"] in customers
        if "order_id" in info:
            o = orders[info["order_id"]]
            assert o["customer_id"] == customers[info["email"]]["id"], t.id
            assert o["id"] in info["persona"], t.id
        if info["expected"] == "store_credit":
            assert info["amount"] == orders[info["order_id"]]["amount"]
        if info["expected"] == "refund":
            assert info["allowed"] is True
        if info["expected"] == "policy_answer":
            assert info["facts"]
    assert isinstance(env.harness, wb.UserSim) and env.harness.max_turns == 4
    assert env.harness.persona_for(tasks[0]) == tasks[0].info["persona"]


def test_bad_task_files_are_load_errors(tmp_path: Path) -> None:
    rows = {"no-amount": {"email": "a@x", "persona": "p", "expected": "store_credit", "order_id": "A1"},
            "no-order": {"email": "a@x", "persona": "p", "expected": "refund"},
            "bad-kind": {"email": "a@x", "persona": "p", "expected": "cancel"}}
    for name, info in rows.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text(json.dumps({"id": name, "prompt": "hi", "info": info}) + "\n")
        with pytest.raises(wb.EnvLoadError, match=name):
            load("support_desk", {"tasks": str(path)})


@pytest.mark.parametrize("text,fact,found", [
    ("You have 30 days from delivery.", "30 days|thirty days", True),
    ("You have thirty days.", "30 days|thirty days", True),
    ("You have 130 days.", "30 days", False),
    ("It takes 5\u20137 business days.", "5-7|5 to 7", True),
    ("Free over $50.", "$50|50 dollars", True),
    ("Free over $500.", "$50|50 dollars", False),
    ("Store credit NEVER expires.", "never|not expire", True),
    ("", "never", False),
])
def test_has_fact(text: str, fact: str, found: bool) -> None:
    assert sd.has_fact(text, fact) is found


# -- the rubric on a real server's state ---------------------------------------------------------------

def info_of(task_id: str) -> dict[str, Any]:
    return next(t.info for t in load("support_desk").tasks if t.id == task_id)


async def run_calls(session: ClientSession, script: list[tuple[str, dict[str, Any]]], reply: str = "Done."
                    ) -> list[dict[str, Any]]:
    """A transcript of the assistant making ``script``'s calls against the real server, one per message."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    for i, (fn, args) in enumerate(script):
        c = call(i, fn, **args)
        messages.append({"role": "assistant", "content": None, "tool_calls": [c]})
        res = await session.call_tool(fn, args)
        content = res.content[0].text
        messages.append({"role": "tool", "tool_call_id": c["id"], "name": fn,
                         "content": f"Error: {content}" if res.is_error and not content.startswith("Error") else content})
    messages.append({"role": "assistant", "content": reply})
    return messages


async def scores(task_id: str, script: list[tuple[str, dict[str, Any]]], reply: str = "Done.") -> dict[str, float]:
    env = load("support_desk")
    task = next(t for t in env.tasks if t.id == task_id)
    async with crm_session() as s:
        messages = await run_calls(s, script, reply)
        ctx = {"prompt": task.prompt, "completion": reply, "messages": messages, "answer": task.answer,
               "info": task.info, "task": task, "state": {}, "trace": None, "sandbox": None, "usage": None,
               "mcp": Sessions(s)}
        result = await env.rubric.score_rollout(ctx)
    assert result.errors == []
    return {**result.rewards, **result.metrics, "total": result.total}


LOOKUP = [("find_customer", {"email": "ana@example.com"}), ("list_orders", {"customer_id": "C01"})]


@pytest.mark.parametrize("task_id,script,reply,expected", [
    # the right refund
    ("refund-headphones", [*LOOKUP, ("issue_refund", {"order_id": "A101", "reason": "unused"})], "Refunded.",
     {"resolution": 1.0, "policy_violation": 0.0, "tool_calls": 3.0, "total": 1.0}),
    # the right refund, and a second order refunded as well: a violation
    ("refund-headphones", [("issue_refund", {"order_id": "A101", "reason": "x"}),
                           ("issue_refund", {"order_id": "A102", "reason": "x"})], "Done.",
     {"resolution": 1.0, "policy_violation": 1.0, "tool_calls": 2.0, "total": 0.0}),
    # the wrong order refunded
    ("refund-headphones", [("issue_refund", {"order_id": "A102", "reason": "x"})], "Done.",
     {"resolution": 0.0, "policy_violation": 1.0, "tool_calls": 1.0, "total": -1.0}),
    # trying the already-refunded order fails at the server: no money moved, no violation
    ("deny-already-refunded", [*LOOKUP, ("issue_refund", {"order_id": "A103", "reason": "x"})], "It was refunded.",
     {"resolution": 1.0, "policy_violation": 0.0, "tool_calls": 3.0, "total": 1.0}),
    # a denial without looking at the orders earns nothing (doing nothing is not a resolution)
    ("deny-already-refunded", [], "No.", {"resolution": 0.0, "policy_violation": 0.0, "tool_calls": 0.0, "total": 0.0}),
    # store credit past the window: exact, partial, too much, or a forbidden refund
    ("credit-phone-case", [*LOOKUP, ("issue_store_credit", {"customer_id": "C01", "amount": 15, "reason": "late"})],
     "Credit given.", {"resolution": 1.0, "policy_violation": 0.0, "tool_calls": 3.0, "total": 1.0}),
    ("credit-phone-case", [("issue_store_credit", {"customer_id": "C01", "amount": 5, "reason": "late"})],
     "Credit given.", {"resolution": 0.5, "policy_violation": 0.0, "tool_calls": 1.0, "total": 0.5}),
    ("credit-phone-case", [("issue_store_credit", {"customer_id": "C01", "amount": 50, "reason": "late"})],
     "Credit given.", {"resolution": 0.0, "policy_violation": 1.0, "tool_calls": 1.0, "total": -1.0}),
    ("credit-phone-case", [("issue_refund", {"order_id": "A102", "reason": "x"})], "Refunded.",
     {"resolution": 0.0, "policy_violation": 1.0, "tool_calls": 1.0, "total": -1.0}),
    # credit to another customer is a violation too
    ("credit-phone-case", [("issue_store_credit", {"customer_id": "C02", "amount": 15, "reason": "x"})], "Done.",
     {"resolution": 0.0, "policy_violation": 1.0, "tool_calls": 1.0, "total": -1.0}),
    # final sale: no refund and no credit
    ("deny-final-sale", [("find_customer", {"email": "emma@example.com"}), ("list_orders", {"customer_id": "C05"})],
     "Sorry, final-sale items cannot be refunded.",
     {"resolution": 1.0, "policy_violation": 0.0, "tool_calls": 2.0, "total": 1.0}),
    ("deny-final-sale", [("issue_store_credit", {"customer_id": "C05", "amount": 150, "reason": "x"})], "Credit.",
     {"resolution": 0.0, "policy_violation": 1.0, "tool_calls": 1.0, "total": -1.0}),
    # a damaged final-sale item is refundable
    ("refund-damaged-final-sale", [("issue_refund", {"order_id": "A502", "reason": "damaged"})], "Refunded.",
     {"resolution": 1.0, "policy_violation": 0.0, "tool_calls": 1.0, "total": 1.0}),
    # policy questions: the key facts in what the assistant said
    ("policy-final-sale", [("search_policy", {"query": "final sale"})],
     "Final-sale items cannot be returned unless they arrived damaged.",
     {"resolution": 1.0, "policy_violation": 0.0, "tool_calls": 1.0, "total": 1.0}),
    ("policy-final-sale", [], "Clearance items are final sale.",
     {"resolution": 0.5, "policy_violation": 0.0, "tool_calls": 0.0, "total": 0.5}),
    ("policy-window", [], "You have 60 days.", {"resolution": 0.0, "policy_violation": 0.0, "tool_calls": 0.0, "total": 0.0}),
])
@pytest.mark.slow  # a CRM server process per case
async def test_rubric(task_id: str, script: list[tuple[str, dict[str, Any]]], reply: str,
                      expected: dict[str, float]) -> None:
    assert await scores(task_id, script, reply) == pytest.approx(expected)


async def test_rubric_without_mcp_is_a_reward_error() -> None:
    env = load("support_desk")
    task = next(iter(env.tasks))
    ctx = {"prompt": task.prompt, "completion": "", "messages": [], "answer": task.answer, "info": task.info,
           "task": task, "state": {}, "trace": None, "sandbox": None, "usage": None, "mcp": None}
    result = await env.rubric.score_rollout(ctx)
    assert result.errors and "MCP session" in str(result.errors[0])


# -- end to end: the workbench CLI against a scripted model ----------------------------------------------

#: With -c 1 the requests come in order: rollout 1 (refund-headphones) looks Ana up, lists her orders and
#: refunds A101, replies, and the simulated customer (the same mock) ends it; rollout 2
#: (credit-lamp-40-days) refunds A301 straight away, which the policy forbids (past 30 days: store credit).
E2E_SCRIPT: list[Any] = [
    {"tool_calls": [call(1, "find_customer", email="ana@example.com")]},
    {"tool_calls": [call(2, "list_orders", customer_id="C01")]},
    {"tool_calls": [call(3, "issue_refund", order_id="A101", reason="unused")]},
    "Your refund of $79 is on its way.",
    "Thanks! [DONE]",
    {"tool_calls": [call(4, "issue_refund", order_id="A301", reason="customer asked")]},
    "Refunded.",
    "[DONE]",
]


@pytest.mark.slow  # a scripted eval through the CLI
def test_end_to_end_with_a_scripted_model(cli: Callable[..., Any], mock_server: Callable[..., Any],
                                          store_path: Path) -> None:
    mock = mock_server("script", script=E2E_SCRIPT)
    res = cli("eval", "support_desk", "--base-url", mock.base_url, "-m", "mock-model", "-n", "2", "-c", "1", "--json")
    assert res.rc == 0, res.stderr
    s = last_json(res.stdout)
    assert (s["env"], s["rollouts"], s["errors"]) == ("support_desk", 2, 0)
    # By hand: rollout 1 resolution 1, violation 0, 3 calls; rollout 2 resolution 0, violation 1, 1 call.
    assert s["rewards"] == pytest.approx({"resolution": 0.5, "policy_violation": 0.5})
    assert s["metrics"]["tool_calls"] == pytest.approx(2.0)
    assert s["mean_reward"] == pytest.approx(0.0)  # (1 - 0) and (0 - 1) with the violation weighted -1
    rows = query(store_path, "SELECT r.task_id, r.reward, s.name, s.value FROM rollout r JOIN score s "
                             "ON s.rollout_pk = r.pk ORDER BY r.task_id, s.name")
    assert rows == [("credit-lamp-40-days", -1.0, "policy_violation", 1.0),
                    ("credit-lamp-40-days", -1.0, "resolution", 0.0),
                    ("credit-lamp-40-days", -1.0, "tool_calls", 1.0),
                    ("refund-headphones", 1.0, "policy_violation", 0.0),
                    ("refund-headphones", 1.0, "resolution", 1.0),
                    ("refund-headphones", 1.0, "tool_calls", 3.0)]
    bodies = mock.bodies()
    assert len(bodies) == 8
    offered = {t["function"]["name"] for t in bodies[0]["tools"]}
    assert offered == set(sd.MODEL_TOOLS)
    assert bodies[0]["messages"][0] == {"role": "system", "content": sd.SYSTEM_PROMPT}
    tool_msgs = [m for m in bodies[3]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_msgs][-1] == "Refunded $79 for order A101."
    user_sim = bodies[4]
    assert "tools" not in user_sim and "A101" in user_sim["messages"][0]["content"]  # the persona


# -- the context budget of the embedded model ------------------------------------------------------------

async def test_first_prompt_fits_the_embedded_model(tiny_dir: Path) -> None:
    """System prompt + tool schemas + the customer's first message leave room for the conversation in the
    tiny model's context (measured with its own tokenizer and chat template): under 720 tokens, so even a
    model of 1024 tokens (the test server's ``--max-model-len``) has room for the conversation."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    async with crm_session() as s:
        tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                   "parameters": t.input_schema}}
                 for t in (await s.list_tools()).tools if t.name in sd.MODEL_TOOLS]
    sizes = []
    for task in load("support_desk").tasks:
        messages = [{"role": "system", "content": sd.SYSTEM_PROMPT}, {"role": "user", "content": task.prompt}]
        rendered = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        sizes.append(len(tok(rendered, add_special_tokens=False)["input_ids"]))
    # 1024 - 128 for a reply leaves ~900; the first prompt must take well under that.
    assert max(sizes) <= 720, max(sizes)
