"""__env_name__: a tool-use environment. The model answers questions about a shop's stock by calling
tools, then replies with a number.

Made from the ``tools`` template (``workbench new __env_name__ --template tools``).

    workbench validate __env_name__
    workbench eval __env_name__ -n 4 -r 4
    workbench show ROLLOUT                     # the transcript: tool calls and their results

A tool is a plain (async or sync) Python function. Its signature and docstring become the JSON
schema the model sees, so write them for the model: say what the tool does and what each argument
means. Parameters named `state`, `task`, `info` or `sandbox` are injected by Workbench and hidden
from the model.
"""

from __future__ import annotations

import re
from typing import Any

import workbench as wb

# The world the tools read. Here a dict; in a real environment an offline corpus, a database file
# or an API stub. Keep it deterministic: the same task must always have the same gold answer.
STOCK: dict[str, int] = {
    "red mug": 14, "blue mug": 9, "green mug": 0, "teapot": 6, "tea towel": 31,
    "kettle": 4, "coaster": 120, "milk jug": 11, "sugar bowl": 7, "saucer": 48,
}
PRICES: dict[str, float] = {
    "red mug": 8.0, "blue mug": 8.0, "green mug": 9.0, "teapot": 35.0, "tea towel": 6.0,
    "kettle": 42.0, "coaster": 2.0, "milk jug": 15.0, "sugar bowl": 12.0, "saucer": 5.0,
}

SYSTEM_PROMPT = ("You work in a homeware shop. Use the tools to look items up; never guess a number. "
                 "When you know the answer, reply with it as a plain number and no tool call.")

# Each task states the question and the tool calls that answer it, so the gold answer is computed
# from the same data the tools serve: it can never disagree with them.
QUESTIONS: list[tuple[str, str, list[str]]] = [
    ("How many red mugs and blue mugs are in stock together?", "sum_stock", ["red mug", "blue mug"]),
    ("How many teapots, kettles and milk jugs are in stock in total?", "sum_stock", ["teapot", "kettle", "milk jug"]),
    ("How many green mugs are in stock?", "sum_stock", ["green mug"]),
    ("What is the value in dollars of all the coasters in stock?", "value", ["coaster"]),
    ("What is the value in dollars of all the kettles in stock?", "value", ["kettle"]),
    ("How many more saucers than tea towels are in stock?", "difference", ["saucer", "tea towel"]),
]


def _gold(kind: str, items: list[str]) -> str:
    value: float
    if kind == "sum_stock":
        value = sum(STOCK[i] for i in items)
    elif kind == "value":
        value = sum(STOCK[i] * PRICES[i] for i in items)
    else:
        value = STOCK[items[0]] - STOCK[items[1]]
    return f"{value:g}"


def make_rows() -> list[dict[str, Any]]:
    return [{"prompt": q, "answer": _gold(kind, items), "info": {"kind": kind, "items": items}}
            for q, kind, items in QUESTIONS]


# -- tools: what the model can do ------------------------------------------------------------------
def stock(item: str, state: dict[str, Any]) -> str:
    """Look up how many units of an item the shop has in stock.

    Args:
        item: the item's name, e.g. "red mug" or "teapot"
    """
    state["tool_calls"] = state.get("tool_calls", 0) + 1  # `state` is per rollout and injected
    key = item.strip().lower()
    if key not in STOCK:
        # An exception goes back to the model as the tool's reply, so make it helpful.
        raise KeyError(f"no item {item!r}; items: {', '.join(sorted(STOCK))}")
    return f"{STOCK[key]} units of {key} in stock"


def price(item: str, state: dict[str, Any]) -> str:
    """Look up the price of one unit of an item, in dollars.

    Args:
        item: the item's name, e.g. "coaster"
    """
    state["tool_calls"] = state.get("tool_calls", 0) + 1
    key = item.strip().lower()
    if key not in PRICES:
        raise KeyError(f"no item {item!r}; items: {', '.join(sorted(PRICES))}")
    return f"{key}: ${PRICES[key]:g} each"


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def final_number(text: str | None) -> float | None:
    found = _NUMBER.findall((text or "").replace(",", "").replace("$", ""))
    return float(found[-1]) if found else None


def load_environment(max_turns: int = 6) -> wb.Environment:
    """``max_turns``: model turns per episode (each may call several tools at once)."""
    rubric = wb.Rubric()

    # The usual holes, which `workbench probe` tries on this rubric before any training does: a substring
    # check that a list of every number passes, a reward for length, a check that another task's answer or a
    # wrong value in the right format satisfies, a judge model that can be told to give full marks, a test
    # the agent can edit in its sandbox. Compare the whole final answer, keep your own copy of what you
    # check against, and run `workbench probe __env_name__` after every rubric change.
    @rubric.reward(weight=1.0)
    def correct(completion: str, answer: str) -> float:
        """1.0 when the final reply's last number equals the gold answer."""
        got = final_number(completion)
        return float(got is not None and abs(got - float(answer)) < 1e-6)

    # `messages` is the whole conversation as OpenAI-style dicts: count what the model did.
    @rubric.metric
    def tool_calls(messages: list[dict[str, Any]]) -> float:
        """How many tool calls the model made."""
        return float(sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant"))

    # A metric that flags a behaviour worth watching: answering without looking anything up.
    @rubric.metric
    def answered_blind(messages: list[dict[str, Any]]) -> float:
        """1.0 when the model replied without calling any tool."""
        return float(not any(m.get("role") == "tool" for m in messages))

    return wb.Environment(
        name="__env_name__",
        tasks=wb.TaskSet.from_records(make_rows(), name="__env_name__"),
        harness=wb.ToolLoop(tools=[stock, price], max_turns=max_turns, system_prompt=SYSTEM_PROMPT),
        rubric=rubric,
        sampling=wb.Sampling(max_tokens=512, temperature=1.0),
        description="Answer stock questions about a small shop with the stock and price tools.",
    )
