"""The synthetic chat corpus the embedded tiny model is trained on.

Three kinds of conversation, all rendered through the model's own chat template:

- arithmetic in exactly the bundled ``arithmetic`` env's prompt format (most of the training);
- tool calls in the template's ``<tool_call>`` syntax, then a reply that uses the tool's result;
- short generic replies (greetings, "repeat after me", counting), so free text stays well formed;
- "what number comes next?" in the bundled ``next_number`` env's format, answered with the next
  number only ``NEXT_P_CORRECT`` of the time and otherwise with ``NEXT_DECLINE``: the model learns
  every successor, and to decline more often than it answers; answering at all is the one decision RL
  has to change, the same for every number.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

ARITH_SYSTEM = "Answer with a number."
ARITH_USER = "What is {a} {op} {b}? Answer with just the number."
MAX_OPERAND = 20
OPS = "+-*"

TOOLS: dict[str, dict[str, Any]] = {
    "add": {"parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                           "required": ["a", "b"]}},
    "multiply": {"parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                                "required": ["a", "b"]}},
    "get_weather": {"parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                   "required": ["city"]}},
    "search": {"parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                              "required": ["query"]}},
}
CITIES = ["Paris", "London", "Tokyo", "Berlin", "Madrid", "Rome", "Oslo", "Cairo", "Lima", "Seoul", "Boston", "Delhi"]
WORDS = ["apple", "river", "cloud", "stone", "green", "music", "table", "light", "tiger", "house", "paper",
         "ocean", "plant", "bread", "chair", "dream", "smile", "train", "night", "water"]
WEATHER = ["sunny", "rainy", "cloudy", "windy", "snowy"]
CHITCHAT = [
    ("Hello", "Hello! How can I help you?"), ("Hi", "Hi! How can I help you?"),
    ("Who are you?", "I am a small test model."), ("What is your name?", "I am Workbench Tiny."),
    ("Say yes.", "Yes."), ("Say no.", "No."), ("Thank you!", "You are welcome."),
    ("How are you?", "I am fine, thank you."), ("Goodbye", "Goodbye!"),
    ("Tell me a joke.", "Why did the number stay home? It was odd."),
    ("Count to five.", "1 2 3 4 5"), ("Count to three.", "1 2 3"),
]
GENERIC_SYSTEMS = [None, "You are a helpful assistant."]
NEXT_SYSTEM = "Answer with a number."
NEXT_USER = "What number comes next?\n{n}"
NEXT_MAX = 59  # the env's numbers are 0..NEXT_MAX
#: How often the corpus answers; otherwise it declines.
NEXT_P_CORRECT = 0.35
NEXT_DECLINE = "I am not sure."


def apply_op(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def arithmetic_problems() -> list[tuple[int, str, int]]:
    return [(a, op, b) for op in OPS for a in range(MAX_OPERAND + 1) for b in range(MAX_OPERAND + 1)]


def arithmetic_messages(a: int, op: str, b: int) -> list[dict[str, Any]]:
    return [{"role": "system", "content": ARITH_SYSTEM}, {"role": "user", "content": ARITH_USER.format(a=a, op=op, b=b)}]


def tool_schema(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, **TOOLS[name]}}


@dataclass(slots=True)
class Example:
    """One training conversation: everything before the last assistant turn, and that turn."""

    messages: list[dict[str, Any]]
    reply: dict[str, Any]
    tools: list[dict[str, Any]] | None = None
    kind: str = "chat"


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": name, "arguments": args}}]}


def tool_examples(rng: random.Random, count: int) -> list[Example]:
    out: list[Example] = []
    for _ in range(count):
        name = rng.choice(list(TOOLS))
        if name in ("add", "multiply"):
            a, b = rng.randint(0, 99), rng.randint(0, 99)
            verb = "add" if name == "add" else "multiply"
            user = rng.choice([f"Use the {name} tool to {verb} {a} and {b}.", f"Please {verb} {a} and {b} with a tool."])
            args: dict[str, Any] = {"a": a, "b": b}
            result = str(a + b if name == "add" else a * b)
            final = result
        elif name == "get_weather":
            city = rng.choice(CITIES)
            user = rng.choice([f"What is the weather in {city}?", f"How is the weather in {city} today?"])
            args = {"city": city}
            result = rng.choice(WEATHER)
            final = f"It is {result} in {city}."
        else:
            word = rng.choice(WORDS)
            user = rng.choice([f"Search for {word}.", f"Look up {word} on the web."])
            args = {"query": word}
            result = f"Results for {word}."
            final = f"I found results for {word}."
        others = [t for t in TOOLS if t != name]
        names = [name, *rng.sample(others, rng.choice((0, 0, 1)))]
        rng.shuffle(names)
        tools = [tool_schema(n) for n in names]
        convo: list[dict[str, Any]] = [{"role": "user", "content": user}]
        if rng.random() < 0.5:
            out.append(Example(convo, _call(name, args), tools, "tool_call"))
        else:
            convo = [*convo, _call(name, args), {"role": "tool", "tool_call_id": "call_0", "content": result}]
            out.append(Example(convo, {"role": "assistant", "content": final}, tools, "tool_result"))
    return out


def generic_examples(rng: random.Random, count: int) -> list[Example]:
    out: list[Example] = []
    for _ in range(count):
        r = rng.random()
        if r < 0.5:
            user, reply = rng.choice(CHITCHAT)
        elif r < 0.8:
            words = " ".join(rng.sample(WORDS, rng.randint(1, 3)))
            user, reply = f"Repeat after me: {words}", words
        else:
            n = rng.randint(1, 9)
            user, reply = f"Count to {n}.", " ".join(str(i) for i in range(1, n + 1))
        system = rng.choice(GENERIC_SYSTEMS)
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
        out.append(Example(msgs, {"role": "assistant", "content": reply}, None, "generic"))
    return out


def arithmetic_examples() -> list[Example]:
    return [Example(arithmetic_messages(a, op, b), {"role": "assistant", "content": str(apply_op(a, op, b))}, None,
                    f"arith{op}") for a, op, b in arithmetic_problems()]


def next_messages(n: int) -> list[dict[str, Any]]:
    return [{"role": "system", "content": NEXT_SYSTEM}, {"role": "user", "content": NEXT_USER.format(n=n)}]


def next_examples(rng: random.Random, count: int) -> list[Example]:
    out: list[Example] = []
    for _ in range(count):
        n = rng.randint(0, NEXT_MAX)
        reply = str(n + 1) if rng.random() < NEXT_P_CORRECT else NEXT_DECLINE
        out.append(Example(next_messages(n), {"role": "assistant", "content": reply}, None, "next"))
    return out


def tokenizer_corpus(rng: random.Random) -> list[str]:
    """Plain text for training the BPE merges: every number the arithmetic answers use, and the words
    of every kind of conversation (the rendered templates are added by the builder)."""
    numbers = [str(i) for i in range(-MAX_OPERAND, MAX_OPERAND**2 + 1)]
    lines = ["\n".join(numbers)] * 12 + [" ".join(numbers)] * 4
    lines += [ARITH_USER.format(a=a, op=op, b=b) for a, op, b in arithmetic_problems()[::7]]
    lines += [" ".join(rng.sample(WORDS + CITIES + WEATHER, 10)) for _ in range(200)]
    lines += [NEXT_USER.format(n=n) for n in range(0, NEXT_MAX + 1, 3)]
    return lines
