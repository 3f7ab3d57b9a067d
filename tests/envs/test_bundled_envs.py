"""The bundled environments: task generation, rubrics, the wordle harness and the doc_search tools."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import workbench_envs.doc_search as doc_search
import workbench_envs.wordle as wordle

import workbench as wb
from workbench.authoring.discovery import load

MOCK_ARITH = re.compile(r"(-?\d+)\s*([-+*x×])\s*(-?\d+)")  # what workbench/testing/mock_openai.py parses
DOCS = Path(doc_search.__file__).parent


def ctx(task: wb.Task, completion: str = "", messages: list[dict[str, Any]] | None = None,
        state: dict[str, Any] | None = None) -> dict[str, Any]:
    """A score context as the engine builds it for one rollout."""
    if messages is None:
        messages = [{"role": "user", "content": task.prompt}, {"role": "assistant", "content": completion}]
    return {"prompt": task.prompt, "completion": completion, "messages": messages, "answer": task.answer,
            "info": task.info, "task": task, "state": {} if state is None else state, "trace": None,
            "sandbox": None, "usage": None}


async def score(env: wb.Environment, task: wb.Task, completion: str = "", **kw: Any) -> Any:
    s = await env.rubric.score_rollout(ctx(task, completion, **kw))
    assert s.errors == []
    return s


class ScriptedClient:
    """Stands in for the chat client: replies come from a list; every request is kept."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies, self.requests = list(replies), []

    async def chat(self, *, base_url: str, model: str, messages: list[dict[str, Any]], tools: Any,
                   params: dict[str, Any]) -> Any:
        self.requests.append({"messages": [dict(m) for m in messages], "tools": tools})
        return SimpleNamespace(message=self.replies.pop(0), prompt_tokens=1, completion_tokens=1,
                               finish_reason="stop", extra=None)


def rollout(task: wb.Task, replies: list[Any]) -> tuple[wb.Rollout, ScriptedClient]:
    msgs = [r if isinstance(r, dict) else {"role": "assistant", "content": r} for r in replies]
    client = ScriptedClient(msgs)
    return wb.Rollout(id="r0", task=task, sample_index=0, client=client, base_url="http://x/v1", model="m",
                      params={}), client  # type: ignore[arg-type]


COUNTS = {"arithmetic": 200, "wordle": 100, "doc_search": 46}


def test_loads_with_stable_unique_ids() -> None:
    ids: dict[str, list[str]] = {}
    for name, count in COUNTS.items():
        a, b = load(name), load(name)
        assert a.name == name and a.version and a.version == b.version
        ids[name] = [t.id for t in a.tasks]
        assert len(ids[name]) == count and len(set(ids[name])) == count
        assert ids[name] == [t.id for t in b.tasks] and [t.answer for t in a.tasks] == [t.answer for t in b.tasks]
    # Another process with another hash seed builds the same tasks (no set/hash-order dependence).
    code = "import json; from workbench.authoring.discovery import load; print(json.dumps({n: [t.id for t in load(n).tasks] for n in %r}))"
    out = subprocess.run([sys.executable, "-c", code % list(COUNTS)], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout
    assert json.loads(out) == ids
    # The generators are part of the task identity: changing them silently would orphan stored runs.
    assert [(t.prompt[:15], t.answer) for t in load("arithmetic", {"n": 3}).tasks] == [
        ("What is 4 - 14?", "-10"), ("What is 5 + 15?", "20"), ("What is 1 - 13?", "-12")]
    assert [t.answer for t in load("wordle", {"n": 3}).tasks] == ["earth", "joint", "coast"]


# -- arithmetic -------------------------------------------------------------------------------------

def test_arithmetic_tasks() -> None:
    env = load("arithmetic")
    assert env.harness.system_prompt == "Answer with a number."
    assert (env.sampling.max_tokens, env.sampling.temperature) == (16, 1.0)
    for t in env.tasks:
        m = re.fullmatch(r"What is (\d+) ([-+*]) (\d+)\? Answer with just the number\.", t.prompt)
        assert m, t.prompt
        a, op, b = int(m[1]), m[2], int(m[3])
        assert 0 <= a <= 20 and 0 <= b <= 20
        assert t.answer == str(a + b if op == "+" else a - b if op == "-" else a * b)
        mock = list(MOCK_ARITH.finditer(t.prompt))[-1]
        assert (int(mock[1]), mock[2], int(mock[3])) == (a, op, b)
    assert {t.info["op"] for t in env.tasks} == {"+", "-", "*"}
    assert len({t.prompt for t in env.tasks}) == 200  # distinct problems


def test_arithmetic_kwargs() -> None:
    big = load("arithmetic", {"n": 200, "seed": 3})
    small = load("arithmetic", {"n": 10, "seed": 3})
    assert [t.id for t in small.tasks] == [t.id for t in big.tasks][:10]  # prefix-stable in n
    assert [t.id for t in load("arithmetic", {"n": 10, "seed": 4}).tasks] != [t.id for t in small.tasks]
    only_add = load("arithmetic", {"n": 30, "ops": "+", "max_operand": 5})
    assert all(" + " in t.prompt and int(t.answer) <= 10 for t in only_add.tasks)
    tiny = load("arithmetic", {"n": 10, "ops": "+", "max_operand": 1})  # 4 distinct problems, then repeats
    assert len({t.prompt for t in tiny.tasks}) == 4 and len({t.id for t in tiny.tasks}) == 10
    for bad in ({"ops": "/"}, {"ops": ""}, {"n": 0}, {"max_operand": 0}):
        with pytest.raises(wb.EnvLoadError):
            load("arithmetic", bad)


@pytest.mark.parametrize("completion,answer,expected", [
    ("19", "19", 1.0), (" 19\n", "19", 1.0), ("The answer is 19.", "19", 1.0), ("7 + 12 = 19", "19", 1.0),
    ("18... no wait, 19", "19", 1.0), ("19 or 20", "19", 0.0), ("1,234", "1234", 1.0),
    ("It is -5.", "-5", 1.0), ("5", "-5", 0.0), ("\u22125", "-5", 1.0), ("19.0", "19", 1.0),
    ("19.5", "19", 0.0), ("", "19", 0.0), ("nineteen", "19", 0.0), ("What is 7 + 12?", "19", 0.0),
    ("0", "0", 1.0), ("190", "19", 0.0),
])
async def test_arithmetic_correct(completion: str, answer: str, expected: float) -> None:
    env = load("arithmetic", {"n": 1})
    task = wb.Task(prompt="What is ?", answer=answer)
    s = await score(env, task, completion)
    assert s.rewards == {"correct": expected} and s.total == expected
    assert s.metrics == {"words": len(completion.split()), "has_number": 1.0 if re.search(r"\d", completion) else 0.0}


async def test_arithmetic_concise_group() -> None:
    env = load("arithmetic", {"n": 1})
    task = wb.Task(prompt="What is 7 + 12? Answer with just the number.", answer="19")
    completions = ["The answer is 19.", "19", "20", " 19 ", "7 + 12 = 19"]
    ctxs = [ctx(task, c) for c in completions]
    scores = [await env.rubric.score_rollout(c) for c in ctxs]
    await env.rubric.score_group(ctxs, scores)
    assert [s.rewards["concise"] for s in scores] == [0.0, 1.0, 0.0, 1.0, 0.0]  # ties share the bonus
    assert [s.total for s in scores] == pytest.approx([1.0, 1.2, 0.0, 1.2, 1.0])
    assert all(s.errors == [] for s in scores)
    wrong = [ctx(task, c) for c in ("20", "21", "")]
    wscores = [await env.rubric.score_rollout(c) for c in wrong]
    await env.rubric.score_group(wrong, wscores)
    assert [(s.rewards["concise"], s.total) for s in wscores] == [(0.0, 0.0)] * 3


# -- wordle -----------------------------------------------------------------------------------------

def test_wordle_tasks() -> None:
    env = load("wordle")
    words = set(wordle.load_words(5))
    assert len(words) >= 300 and all(len(w) == 5 and w.isalpha() and w.islower() for w in words)
    secrets = [t.answer for t in env.tasks]
    assert len(set(secrets)) == 100 and set(secrets) <= words
    assert all("5-letter" in t.prompt for t in env.tasks)
    assert isinstance(env.harness, wb.MultiTurn) and env.harness.max_turns == 6
    assert "G" in env.harness.system_prompt and "<guess>" in env.harness.system_prompt
    assert [t.answer for t in load("wordle", {"n": 100, "seed": 1}).tasks] != secrets
    assert [t.answer for t in load("wordle", {"n": 5}).tasks] == secrets[:5]
    with pytest.raises(wb.EnvLoadError, match="4-letter"):
        load("wordle", {"word_length": 4})
    with pytest.raises(wb.EnvLoadError):
        load("wordle", {"max_turns": 0})


@pytest.mark.parametrize("guess,secret,marks", [
    ("paper", "apple", "YYGYX"), ("eerie", "apple", "XXXXG"), ("eerie", "sheet", "YYXXX"),
    ("llama", "apple", "YXYXX"), ("speed", "sheet", "GXGGX"), ("crane", "earth", "XYYXY"),
    ("apple", "apple", "GGGGG"), ("teeth", "sheet", "YYGXY"),
])
def test_wordle_feedback(guess: str, secret: str, marks: str) -> None:
    assert wordle.score_guess(guess, secret) == marks


@pytest.mark.parametrize("text,guess", [
    ("<guess>crane</guess>", "crane"), ("I think... <guess> SLATE </guess>", "slate"),
    ("first <guess>crane</guess> then <guess>slate</guess>", "slate"), ("My guess is crane", "crane"),
    ("<think>maybe crane</think>Going with slate.", "slate"), ("reasoning about crane</think><guess>adieu</guess>", "adieu"),
    ("<guess>ab</guess>", None), ("<guess>crane1</guess>", None), ("no idea", None), ("<guess>cran", None), ("", None),
])
def test_wordle_parse(text: str, guess: str | None) -> None:
    got, reason = wordle.parse_guess(text, 5)
    assert got == guess and bool(reason) == (guess is None)


async def test_wordle_respond_scripted_game() -> None:
    env = load("wordle")
    harness, task = env.harness, wb.Task(prompt="Guess the secret 5-letter word.", answer="apple")
    state: dict[str, Any] = {}
    await harness.setup(task, state)
    messages: list[dict[str, Any]] = [{"role": "user", "content": task.prompt}]
    expected = [
        ("<guess>paper</guess>", "PAPER: Y Y G Y X. 5 guesses left."),
        ("Hmm, <guess>pear</guess>", "Invalid guess: 'pear' is not a valid guess: it must be exactly 5 letters"),
        ("<guess>eerie</guess>", "EERIE: X X X X G. 3 guesses left."),
        ("I'm not sure.", "Invalid guess: I found no 5-letter guess in your reply. That used a turn. 2 guesses left."),
        ("Then llama", "LLAMA: Y X Y X X. 1 guess left."),
    ]
    for reply, feedback in expected:
        messages.append({"role": "assistant", "content": reply})
        out = await harness.respond(messages, state)
        assert out is not None and len(out) == 1 and out[0]["role"] == "user"
        assert out[0]["content"].startswith(feedback), out[0]["content"]
        messages.extend(out)
    messages.append({"role": "assistant", "content": "<guess>APPLE</guess>"})
    assert await harness.respond(messages, state) is None  # solved ends the episode
    assert state["guesses"] == ["paper", "eerie", "llama", "apple"]
    assert state["feedback"] == ["YYGYX", "XXXXG", "YXYXX", "GGGGG"]
    assert (state["invalid_guesses"], state["solved"], state["solved_on_turn"]) == (2, True, 6)
    s = await score(env, task, "<guess>APPLE</guess>", messages=messages, state=state)
    assert s.rewards == {"solved": 1.0, "efficiency": pytest.approx(1 / 6)}
    assert s.metrics == {"guesses": 4.0, "invalid_guesses": 2.0}
    assert s.total == pytest.approx(1.0 + 0.2 / 6)


async def test_wordle_rewards_unsolved_and_first_try() -> None:
    env = load("wordle")
    task = wb.Task(prompt="p", answer="sheet")
    state: dict[str, Any] = {}
    await env.harness.setup(task, state)
    msgs = [{"role": "user", "content": "p"}, {"role": "assistant", "content": "<guess>teeth</guess>"}]
    assert (await env.harness.respond(msgs, state))[0]["content"].startswith("TEETH: Y Y G X Y.")
    s = await score(env, task, "<guess>teeth</guess>", messages=msgs, state=state)
    assert s.rewards == {"solved": 0.0, "efficiency": 0.0} and s.total == 0.0
    assert s.metrics == {"guesses": 1.0, "invalid_guesses": 0.0}
    first = await score(env, task, "<guess>sheet</guess>",
                        messages=[{"role": "user", "content": "p"}, {"role": "assistant", "content": "<guess>sheet</guess>"}],
                        state={})  # no setup: the rubric starts the game from the task's answer
    assert first.rewards == {"solved": 1.0, "efficiency": 1.0} and first.total == pytest.approx(1.2)


async def test_wordle_harness_run_counts_last_turn_and_stops_when_solved() -> None:
    env = load("wordle", {"n": 1, "max_turns": 3})
    task = env.tasks[0]
    r, client = rollout(task, ["<guess>xylyl</guess>", "nothing here", f"<guess>{task.answer}</guess>"])
    await env.harness.run(r)
    assert len(client.requests) == 3
    assert client.requests[0]["messages"][0] == {"role": "system", "content": env.harness.system_prompt}
    assert client.requests[1]["messages"][-1]["content"].startswith("XYLYL: ")
    assert client.requests[2]["messages"][-1]["content"].startswith("Invalid guess")
    s = await env.rubric.score_rollout(r.score_context())
    assert s.errors == []  # respond() never saw the final turn; the rubric must still count the solve
    assert s.rewards == {"solved": 1.0, "efficiency": pytest.approx(1 / 3)}
    assert s.metrics == {"guesses": 2.0, "invalid_guesses": 1.0}
    assert r.state["solved"] is True and r.state["guesses"][-1] == task.answer
    r, client = rollout(task, [f"<guess>{task.answer}</guess>", "<guess>never</guess>"])
    await env.harness.run(r)  # a solve ends the episode
    assert len(client.requests) == 1 and r.state["solved_on_turn"] == 1
    assert (await env.rubric.score_rollout(r.score_context())).rewards == {"solved": 1.0, "efficiency": 1.0}


# -- doc_search -------------------------------------------------------------------------------------

def questions() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DOCS / "questions.jsonl").read_text().splitlines() if line.strip()]


def tools() -> list[Any]:
    return doc_search.make_tools(doc_search.load_corpus())  # [search, read]


def test_doc_search_corpus_and_questions() -> None:
    docs = sorted(p.stem for p in (DOCS / "corpus").glob("*.md"))
    assert 25 <= len(docs) <= 30
    for p in (DOCS / "corpus").glob("*.md"):
        text = p.read_text()
        assert text.startswith("# ") and 100 <= len(text.split()) <= 300, p.name
    rows = questions()
    assert len(rows) >= 40 and len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        src = DOCS / "corpus" / f"{r['info']['source']}.md"
        assert src.is_file(), r
        assert r["answer"].lower() in src.read_text().lower(), r  # the answer is written in its source
        assert doc_search.mentions(src.read_text(), r["answer"]), r


def test_doc_search_env_and_splits() -> None:
    env = load("doc_search")
    assert isinstance(env.harness, wb.ToolLoop) and env.harness.max_turns == 8
    assert "ANSWER:" in env.harness.system_prompt
    assert [t.id for t in env.tasks] == [r["id"] for r in questions()]
    assert env.tasks[0].prompt == questions()[0]["question"] and env.tasks[0].info["source"] == "company-overview"
    assert [s["function"]["name"] for s in env.harness.schemas] == ["search", "read"]
    train, test = load("doc_search", {"split": "train"}), load("doc_search", {"split": "test"})
    tr, te = {t.id for t in train.tasks}, {t.id for t in test.tasks}
    assert tr.isdisjoint(te) and tr | te == {t.id for t in env.tasks}
    assert te == {r["id"] for r in questions() if r["info"]["split"] == "test"} and len(te) >= 8
    with pytest.raises(wb.EnvLoadError, match="split"):
        load("doc_search", {"split": "dev"})


def test_doc_search_tool_schemas() -> None:
    search, read = tools()
    s = wb.Tool.from_function(search).schema()["function"]
    assert s["name"] == "search" and s["description"].startswith("Search the company documents")
    props = s["parameters"]["properties"]
    assert props["query"]["type"] == "string" and props["query"]["description"].startswith("Keywords to look for")
    assert props["k"] == {"type": "integer", "description": "How many documents to return (1 to 20).", "default": 5}
    assert s["parameters"]["required"] == ["query"]
    r = wb.Tool.from_function(read).schema()["function"]
    assert r["parameters"]["required"] == ["doc_id"]
    assert r["parameters"]["properties"]["doc_id"]["description"].startswith("The document id exactly as listed")
    assert "Returns" not in r["description"] and "Args" not in r["description"]


@pytest.mark.parametrize("query,doc", [
    ("What is the nightly hotel limit in San Francisco?", "travel-policy"),
    ("How many weeks of paid parental leave does Acme offer?", "pto-policy"),
    ("What does FleetOS error code E-301 mean?", "fleetos-api-guide"),
    ("torque battery terminal bolts", "battery-maintenance-runbook"),
    ("Rover X3 list price", "rover-x3-spec"),
    ("VPN help desk extension", "vpn-access-runbook"),
])
def test_doc_search_search_ranks_source_first(query: str, doc: str) -> None:
    search, _ = tools()
    out = search(query)
    assert out.splitlines()[0].startswith(f"1. doc_id: {doc} | "), out
    assert 1 <= len(re.findall(r"^\d+\. doc_id: ", out, re.M)) <= 5  # k=5 by default; only matching docs


def test_doc_search_search_quality_and_limits() -> None:
    corpus, rows = doc_search.load_corpus(), questions()
    top1 = sum(corpus.search(r["question"], 1)[0][0].id == r["info"]["source"] for r in rows)
    assert top1 >= 0.9 * len(rows)
    search, _ = tools()
    hotel = search("hotel limit London", k=3).splitlines()
    assert hotel[0].startswith("1. doc_id: travel-policy | Travel Policy (score ")
    assert "London" in hotel[1] and "$320" in hotel[1]  # the snippet is the best-matching line
    assert len(re.findall(r"^\d+\. doc_id: ", search("parental leave", k=2), re.M)) == 2
    assert len(re.findall(r"^\d+\. doc_id: ", search("parental leave", k=999), re.M)) <= 20
    assert search("zzzqqq xyzzy").startswith("No documents match")
    with pytest.raises(ValueError, match="empty"):
        search("   ")
    assert doc_search.load_corpus() is corpus  # built once, cached


def test_doc_search_read() -> None:
    read = tools()[1]
    text = read("expense-policy")
    assert text.startswith("doc_id: expense-policy") and "# Expense Policy" in text and "$0.67 per mile" in text
    assert read("Expense-Policy.md") == text and read(" 'expense-policy' ") == text
    with pytest.raises(ValueError, match="no document with id 'expense-polcy'.*'expense-policy'"):
        read("expense-polcy")
    with pytest.raises(ValueError, match="no document"):
        read("../pyproject")


@pytest.mark.parametrize("completion,answer,expected", [
    ("ANSWER: $110", "$110", 1.0), ("The limit is 110 dollars.\nANSWER: $110 per day", "$110", 1.0),
    ("answer: 110", "$110", 1.0), ("ANSWER: 1100", "$110", 0.0), ("I saw $110 and $75.\nANSWER: $75", "$110", 0.0),
    ("It costs $48,500.", "$48,500", 1.0), ("ANSWER: 48500 USD", "$48,500", 1.0), ("ANSWER: 48.5k", "$48,500", 0.0),
    ("ANSWER: the Building C.", "Building C", 1.0), ("ANSWER: Building CD", "Building C", 0.0),
    ("ANSWER: 0.67", "$0.67", 1.0), ("ANSWER: 67 cents", "$0.67", 0.0), ("ANSWER: FleetOS 5.2.1", "5.2.1", 1.0),
    ("ANSWER: 5.2", "5.2.1", 0.0), ("", "2011", 0.0), ("ANSWER: E-118", "E-118", 1.0),
])
async def test_doc_search_correct(completion: str, answer: str, expected: float) -> None:
    env = load("doc_search")
    s = await score(env, wb.Task(prompt="q", answer=answer, info={"source": "expense-policy"}), completion)
    assert s.rewards == {"correct": expected} and s.total == expected


def call(name: str, args: dict[str, Any], i: int = 0) -> dict[str, Any]:
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


async def test_doc_search_metrics() -> None:
    env = load("doc_search")
    task = wb.Task(prompt="How many PTO days?", answer="22", info={"source": "pto-policy"})
    messages = [
        {"role": "user", "content": task.prompt},
        {"role": "assistant", "content": None, "tool_calls": [call("search", {"query": "PTO days"})]},
        {"role": "tool", "tool_call_id": "c0", "name": "search", "content": "..."},
        {"role": "assistant", "content": None,
         "tool_calls": [call("read", {"doc_id": "benefits-overview"}, 1), call("read", {"doc_id": "PTO-Policy.md"}, 2)]},
        {"role": "tool", "tool_call_id": "c1", "name": "read", "content": "..."},
        {"role": "tool", "tool_call_id": "c2", "name": "read", "content": "..."},
        {"role": "assistant", "content": "ANSWER: 22 days"},
    ]
    s = await score(env, task, "ANSWER: 22 days", messages=messages)
    assert s.rewards == {"correct": 1.0} and s.metrics == {"tool_calls": 3.0, "read_source": 1.0}
    other = wb.Task(prompt="q", answer="22", info={"source": "travel-policy"})
    s2 = await score(env, other, "ANSWER: 22", messages=messages)
    assert s2.metrics == {"tool_calls": 3.0, "read_source": 0.0}
    bare = await score(env, task, "22")
    assert bare.rewards == {"correct": 1.0} and bare.metrics == {"tool_calls": 0.0, "read_source": 0.0}


async def test_doc_search_tool_loop_run() -> None:
    env = load("doc_search")
    task = env.tasks[0]  # founded in 2011, source company-overview
    r, client = rollout(task, [
        {"role": "assistant", "content": None, "tool_calls": [call("search", {"query": "Acme Robotics founded"})]},
        {"role": "assistant", "content": None,
         "tool_calls": [call("read", {"doc_id": "nope"}, 1), call("read", {"doc_id": "company-overview"}, 2)]},
        "Founded in 2011 in Pittsburgh.\nANSWER: 2011",
    ])
    await env.harness.run(r)
    tool_msgs = [m for m in r.messages if m["role"] == "tool"]
    assert "doc_id: company-overview" in tool_msgs[0]["content"]
    assert tool_msgs[1]["content"].startswith("Error: ValueError: there is no document with id 'nope'")
    assert tool_msgs[2]["content"].startswith("doc_id: company-overview")
    assert client.requests[0]["tools"] == env.harness.schemas
    s = await env.rubric.score_rollout(r.score_context())
    assert s.rewards == {"correct": 1.0} and s.metrics == {"tool_calls": 3.0, "read_source": 1.0}


def test_doc_search_custom_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "docs"
    (corpus / "hr").mkdir(parents=True)
    (corpus / "hr" / "leave.md").write_text("# Leave\n\nEveryone gets 31 vacation days at Globex.\n")
    (corpus / "cafeteria.txt").write_text("Cafeteria\n\nLunch is served from 11:30 to 14:00.\n")
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(json.dumps({"question": "How many vacation days?", "answer": "31",
                                 "info": {"source": "hr/leave"}}) + "\n")
    env = load("doc_search", {"corpus_dir": str(corpus), "questions": str(qfile)})
    assert len(env.tasks) == 1 and env.tasks[0].answer == "31"
    search, read = doc_search.make_tools(doc_search.load_corpus(corpus))
    assert search("lunch served").startswith("1. doc_id: cafeteria | Cafeteria")
    assert "31 vacation days" in read("hr/leave")
    qfile.write_text(json.dumps({"question": "q", "answer": "a", "info": {"source": "missing-doc"}}) + "\n")
    with pytest.raises(wb.EnvLoadError, match="missing-doc"):
        load("doc_search", {"corpus_dir": str(corpus), "questions": str(qfile)})
    with pytest.raises(wb.EnvLoadError, match="not a directory"):
        load("doc_search", {"corpus_dir": str(tmp_path / "nowhere")})


def test_doc_search_copied_as_template(tmp_path: Path) -> None:
    copy = tmp_path / "my_docs_env"
    shutil.copytree(DOCS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    env = load(str(copy))
    assert env.name == "doc_search" and len(env.tasks) == len(questions())
    assert env.version == load("doc_search").version  # same files, same version hash
