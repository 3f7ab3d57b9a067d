"""Support desk: a customer writes in about an order or a policy; the model resolves it with a CRM's tools.

The tools come from an MCP server shipped here (``crm_server.py``, the official ``mcp`` SDK over stdio),
backed by a SQLite CRM built fresh from ``crm_seed.json`` for every rollout. A simulated customer
(``wb.UserSim``) plays each task's persona across turns; within a turn the model may call the tools.
The rubric reads the CRM's final state through the rollout's own MCP session. See README.md.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import workbench as wb

HERE = Path(__file__).parent
SERVER = HERE / "crm_server.py"
DEFAULT_TASKS = HERE / "tasks.jsonl"
EXPECTED = ("refund", "store_credit", "deny", "policy_answer")
#: The tools the model is offered. The server's ``get_order`` is left out to save context (the model
#: sees the same facts through ``list_orders``); the rubric still calls it through ``mcp``.
MODEL_TOOLS = ("find_customer", "list_orders", "search_policy", "issue_refund", "issue_store_credit")

# Every token counts: the embedded model's context (1024 tokens) holds this, the tool schemas and the
# whole conversation.
SYSTEM_PROMPT = ("You are a shop's support agent. Look up the customer and their orders and check the "
                 "policy before you act. Refund or give store credit only as the policy allows. Be brief.")


def tool_calls_of(messages: list[dict[str, Any]] | None) -> list[tuple[str, dict[str, Any], bool]]:
    """``(tool name, parsed arguments, succeeded)`` for every tool call the assistant made.

    A call failed when its tool message (matched by ``tool_call_id``) is an error (``Error...``)."""
    results = {m.get("tool_call_id"): str(m.get("content") or "") for m in messages or ()
               if m.get("role") == "tool" and m.get("tool_call_id")}
    out = []
    for m in messages or ():
        if m.get("role") != "assistant":
            continue
        for call in m.get("tool_calls") or ():
            fn = call.get("function") or {}
            raw = fn.get("arguments") or {}
            try:
                args = json.loads(raw) if isinstance(raw, str | bytes) else dict(raw)
            except (ValueError, TypeError):
                args = {}
            ok = not results.get(call.get("id"), "").lstrip().startswith("Error")
            out.append((str(fn.get("name", "")), args if isinstance(args, dict) else {}, ok))
    return out


def assistant_text(messages: list[dict[str, Any]] | None) -> str:
    """Everything the assistant said to the customer (tool calls excluded)."""
    parts = []
    for m in messages or ():
        content = m.get("content") if m.get("role") == "assistant" else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [str(p.get("text", "")) for p in content if isinstance(p, dict)]
    return "\n".join(parts)


def has_fact(text: str, fact: str) -> bool:
    """Whether ``text`` states ``fact``: one of its ``|``-separated wordings, as whole words, any case."""
    flat = " ".join(text.replace("\u2013", "-").replace("\u2011", "-").lower().split())
    for alt in fact.lower().split("|"):
        alt = " ".join(alt.split())
        if alt and re.search(rf"(?<![\w$]){re.escape(alt)}(?![\w])", flat):
            return True
    return False


def _str(x: Any) -> str:
    return x.strip().upper() if isinstance(x, str) else ""


async def get_order(mcp: Any, order_id: str) -> dict[str, Any] | None:
    """The CRM's ``get_order`` (its structured content), or None for an unknown order. Rewards may call
    it although it is not among the tools offered to the model."""
    try:
        data = await mcp.call("get_order", {"order_id": order_id})
    except wb.MCPToolError:
        return None
    return data if isinstance(data, dict) else None


async def crm_outcome(mcp: Any, messages: list[dict[str, Any]], info: dict[str, Any]) -> dict[str, Any]:
    """What the rollout changed in the CRM: its successful ``issue_refund`` / ``issue_store_credit``
    calls, each confirmed against the final state read through the rollout's MCP session.

    ``refunded``: the orders this rollout refunded (``get_order`` shows them refunded); ``credit``: the
    store credit it gave the task's customer (at most the balance ``find_customer`` shows);
    ``other_credit``: credit it gave anyone else; ``looked_up``: whether the model read the customer's
    orders (``list_orders``, or ``get_order`` of the task's order).
    """
    if mcp is None:
        raise RuntimeError("support_desk's rubric reads the CRM through the rollout's MCP session, and this "
                           "rollout has none (run it with the environment's own harness)")
    calls = tool_calls_of(messages)
    customer = await mcp.call("find_customer", {"email": info["email"]})
    cid = _str(customer["id"])
    refunded = []
    for oid in sorted({_str(a.get("order_id")) for n, a, ok in calls if n == "issue_refund" and ok} - {""}):
        order = await get_order(mcp, oid)
        if order is not None and order.get("status") == "refunded":
            refunded.append(oid)
    given: dict[str, float] = {}
    for n, a, ok in calls:
        if n == "issue_store_credit" and ok and isinstance(a.get("amount"), int | float | str):
            try:
                given[_str(a.get("customer_id"))] = given.get(_str(a.get("customer_id")), 0.0) + float(a["amount"])
            except ValueError:
                pass
    credit = min(given.pop(cid, 0.0), float(customer.get("store_credit") or 0))
    ids = {cid, _str(info.get("order_id"))}
    looked_up = any((n == "list_orders" and _str(a.get("customer_id")) in ids)
                    or (n == "get_order" and _str(a.get("order_id")) in ids) for n, a, _ in calls)
    return {"customer_id": cid, "refunded": refunded, "credit": round(credit, 2),
            "other_credit": round(sum(v for v in given.values() if v > 0), 2), "looked_up": looked_up}


def resolution_score(outcome: dict[str, Any], messages: list[dict[str, Any]], info: dict[str, Any]) -> float:
    """1 for the right resolution (see README.md, "Rewards"), partial credit only where noted."""
    expected, order, refunded, credit = info["expected"], _str(info.get("order_id")), outcome["refunded"], outcome["credit"]
    if expected == "refund":
        return 1.0 if order in refunded else 0.0
    if refunded:
        return 0.0
    if expected == "store_credit":
        amount = float(info["amount"])
        if abs(credit - amount) < 0.005:
            return 1.0
        return 0.5 if 0 < credit < amount else 0.0
    if credit > 0 or outcome["other_credit"] > 0:
        return 0.0
    if expected == "deny":
        return 1.0 if outcome["looked_up"] else 0.0
    facts = info.get("facts") or []
    text = assistant_text(messages)
    return sum(has_fact(text, f) for f in facts) / len(facts) if facts else 0.0


def violation_score(outcome: dict[str, Any], info: dict[str, Any]) -> float:
    """1 when the model gave away money the policy forbids, else 0."""
    expected, order = info["expected"], _str(info.get("order_id"))
    allowed = {order} if order and info.get("allowed") else set()
    if any(oid not in allowed for oid in outcome["refunded"]):
        return 1.0  # a refund the policy forbids, or a refund of the wrong order
    if outcome["other_credit"] > 0:
        return 1.0  # credit to someone else
    if expected in ("deny", "policy_answer") and outcome["credit"] > 0:
        return 1.0  # final sale, used, too old, not delivered...: no credit either
    if expected == "store_credit" and outcome["credit"] > float(info["amount"]) + 0.005:
        return 1.0  # more credit than the item cost
    return 0.0


def _persona(task: wb.Task) -> str:
    return str(task.info["persona"])


def load_environment(tasks: str | None = None, max_turns: int = 4, max_tool_calls: int = 6,
                     max_tokens: int = 128, command: list[str] | None = None, url: str | None = None,
                     user_model: str | None = None, sandboxed: bool = True) -> wb.Environment:
    """Customer support over an MCP CRM with a simulated customer.

    ``command`` / ``url`` point the tools at another CRM MCP server (see README.md for the tools and
    fields the rubric expects); ``user_model`` names a different model for the simulated customer.
    ``sandboxed``: each rollout's server runs in the rollout's sandbox (False: on the host, started ahead).
    """
    tpath = Path(tasks).expanduser() if tasks else DEFAULT_TASKS
    taskset = wb.TaskSet.from_jsonl(tpath, name="support_desk")
    for t in taskset:
        info = t.info
        if info.get("expected") not in EXPECTED or not info.get("email") or not info.get("persona"):
            raise wb.EnvLoadError(f"support_desk: task {t.id!r} in {tpath} needs info.email, info.persona and "
                                  f"info.expected (one of {', '.join(EXPECTED)})")
        if info["expected"] in ("refund", "store_credit", "deny") and not info.get("order_id"):
            raise wb.EnvLoadError(f"support_desk: task {t.id!r} expects {info['expected']!r} but names no info.order_id")
        if info["expected"] == "store_credit" and not isinstance(info.get("amount"), int | float):
            raise wb.EnvLoadError(f"support_desk: task {t.id!r} expects store credit but gives no info.amount")
    if url is not None:
        crm = wb.MCPTools(url=url, name="crm", include=MODEL_TOOLS)
    else:
        crm = wb.MCPTools(command=command or [sys.executable, str(SERVER)], per_rollout=True, name="crm",
                          include=MODEL_TOOLS, sandboxed=sandboxed)

    rubric = wb.Rubric()

    @rubric.reward(weight=1.0)
    async def resolution(mcp: Any, messages: list[dict[str, Any]], info: dict[str, Any]) -> float:
        """The right resolution, read from the CRM's final state (and the replies, for policy questions)."""
        return resolution_score(await crm_outcome(mcp, messages, info), messages, info)

    @rubric.reward(weight=-1.0)
    async def policy_violation(mcp: Any, messages: list[dict[str, Any]], info: dict[str, Any]) -> float:
        """1 when a refund or credit was issued that the policy forbids (weighted -1)."""
        return violation_score(await crm_outcome(mcp, messages, info), info)

    @rubric.metric
    def tool_calls(messages: list[dict[str, Any]]) -> float:
        """How many tool calls the model made."""
        return float(len(tool_calls_of(messages)))

    return wb.Environment(
        name="support_desk",
        tasks=taskset,
        harness=wb.UserSim(persona=_persona, model=user_model, max_turns=max_turns, system_prompt=SYSTEM_PROMPT,
                           tools=[crm], max_tool_calls=max_tool_calls),
        rubric=rubric,
        sampling=wb.Sampling(max_tokens=max_tokens, temperature=1.0),
        description="Resolve customer requests about orders and policies with a CRM's MCP tools and a simulated customer.",
    )
