"""``workbench import``: OpenAI chat JSONL, a verifiers ``vf-eval -s`` results directory and an Inspect AI
``.eval`` log become imported runs, round-trip through ``workbench export``, are re-scored by an
environment's rubric, are never imported twice, and bad input ends in one clear line (or, for bad
lines among good ones, a report naming each bad line) with nothing valid lost.

The verifiers results come from verifiers' own ``evaluate(save_results=True)`` against the mock model
server; the Inspect log from a real ``inspect_ai.eval`` run on its built-in ``mockllm/model``. Both run
in a subprocess (their event loops and patches stay out of the test process).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ADDER_ENV, MockServer, assert_user_error, last_json, query, write_file
from workbench.store import Store
from workbench.store.migrations import APPLICATION_ID, MIGRATIONS
from workbench.store.queries import RolloutFilter, count_rollouts

CONVERSATIONS: list[dict[str, Any]] = [
    {"messages": [{"role": "system", "content": "Answer with a number."},
                  {"role": "user", "content": "What is 2 + 3?"},
                  {"role": "assistant", "content": "The answer is 5"}],
     "reward": 1.0, "id": "conv-1", "metadata": {"user": "u1"}},
    {"messages": [{"role": "user", "content": "What is 4 + 5?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 4, \"b\": 5}"}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "9"},
                  {"role": "assistant", "content": [{"type": "text", "text": "It is 9"}]}],
     "tools": [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}],
     "rewards": {"correct": 1.0, "style": 0.5}},
    {"messages": [{"role": "user", "content": "What is 1 + 1?"}, {"role": "assistant", "content": "3"}]},
]


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _export(cli: Callable[..., Any], run_id: str) -> list[dict[str, Any]]:
    """The SFT rows of a run, their JSON-string columns decoded and the empty ``tool_calls`` every
    assistant message carries in an export left out (so they compare with what was imported)."""
    res = cli("export", run_id)
    assert res.rc == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    for r in rows:
        assert isinstance(r["metadata"], str) and isinstance(r["tools"], str)
        r["metadata"], r["tools"] = json.loads(r["metadata"]), json.loads(r["tools"])
        r["messages"] = [{k: v for k, v in m.items() if not (k == "tool_calls" and v == [])} for m in r["messages"]]
    return rows


def _import(cli: Callable[..., Any], *args: Any) -> dict[str, Any]:
    res = cli("import", *args, "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert isinstance(out, dict)
    return out


# -- the formats, round-tripped ------------------------------------------------------------------------
def test_openai_jsonl_round_trips_through_export(cli: Callable[..., Any], tmp_path: Path, store_path: Path) -> None:
    f = _jsonl(tmp_path / "chats.jsonl", CONVERSATIONS)
    out = _import(cli, f, "--format", "openai-jsonl", "--model", "prod-model")
    assert out["rollouts"] == 3 and out["skipped"] == 0 and out["problems"] == []
    assert out["rewarded"] == 2 and out["mean_reward"] == pytest.approx((1.0 + 1.5) / 2)
    rows = _export(cli, out["run_id"])
    assert [r["messages"] for r in rows] == [c["messages"] for c in CONVERSATIONS]
    assert [r["metadata"]["reward"] for r in rows] == [1.0, 1.5, None]
    # the run and its rollouts say where they came from
    kind, model, config = query(store_path, "SELECT kind, model, config FROM run WHERE id = ?", (out["run_id"],))[0]
    imported = json.loads(config)["import"]
    assert kind == "import" and model == "prod-model"
    assert imported["format"] == "openai-jsonl" and imported["file"] == str(f.resolve())
    assert imported["sha256"] == out["sha256"] and len(out["sha256"]) == 64
    assert query(store_path, "SELECT DISTINCT source FROM rollout") == [("imported",)]
    scores = query(store_path, "SELECT name, kind, value FROM score ORDER BY id")
    assert scores == [("correct", "reward", 1.0), ("style", "reward", 0.5)]
    state = json.loads(query(store_path, "SELECT state FROM rollout ORDER BY pk LIMIT 1")[0][0])
    assert state["import"] == {"format": "openai-jsonl", "where": "line 1", "id": "conv-1",
                               "metadata": {"user": "u1"}}
    tools = json.loads(query(store_path, "SELECT state FROM rollout ORDER BY pk LIMIT 1 OFFSET 1")[0][0])
    assert tools["import"]["tools"] == CONVERSATIONS[1]["tools"]
    with Store(store_path) as s:  # the trace browser's filter
        assert count_rollouts(s.conn, RolloutFilter(source="imported")) == 3
        assert count_rollouts(s.conn, RolloutFilter(source="model")) == 0


_VERIFIERS_EVAL = '''
import asyncio, os, sys
from pathlib import Path
from datasets import Dataset
import verifiers as vf
from verifiers.legacy.types import ClientConfig

def correct(completion, answer, **kw):
    return 1.0 if str(answer) in completion[-1]["content"] else 0.0

async def main(url, out):
    rows = [{"question": f"What is {a} + {a + 1}?", "answer": str(2 * a + 1)} for a in range(3)]
    ds = Dataset.from_list(rows)
    env = vf.SingleTurnEnv(dataset=ds, eval_dataset=ds, system_prompt="Answer with a number.",
                           rubric=vf.Rubric(funcs=[correct]))
    os.environ["VF_MOCK_KEY"] = "x"
    client = ClientConfig(api_base_url=url, api_key_var="VF_MOCK_KEY", max_retries=0)
    await env.evaluate(client=client, model="mock-model", num_examples=3, rollouts_per_example=2,
                       results_path=Path(out), save_results=True)

asyncio.run(main(sys.argv[1], sys.argv[2]))
'''


def _legacy_verifiers_python() -> Path:
    """verifiers 0.3's interpreter (the legacy format's own environment, built by uv on first use): verifiers'
    own evaluate writes the results folder."""
    from workbench.frameworks.legacy_source import DEFAULT
    from workbench.frameworks.verifiers_legacy import framework

    return framework(DEFAULT).ensure()


@pytest.fixture
def vf_results(mock_server: Callable[..., MockServer], tmp_path: Path) -> Path:
    """A real ``vf-eval -s`` results directory: verifiers' evaluate and save code against the mock model."""
    python = _legacy_verifiers_python()
    server = mock_server("arithmetic", accuracy=0.5)
    out = tmp_path / "vf-results"
    script = write_file(tmp_path / "vf_eval.py", _VERIFIERS_EVAL)
    proc = subprocess.run([str(python), script, server.base_url, out], capture_output=True, text=True, timeout=180,
                          env={k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "results.jsonl").is_file() and (out / "metadata.json").is_file()
    return out


@pytest.mark.slow  # its results come from a real verifiers evaluate run (verifiers imported)
def test_verifiers_results_round_trip_through_export(cli: Callable[..., Any], vf_results: Path,
                                                     store_path: Path) -> None:
    saved = [json.loads(line) for line in (vf_results / "results.jsonl").read_text().splitlines()]
    assert len(saved) == 6
    out = _import(cli, vf_results, "--format", "verifiers")
    assert out["rollouts"] == 6 and out["skipped"] == 0 and out["model"] == "mock-model"
    rows = _export(cli, out["run_id"])
    by_slot = sorted(saved, key=lambda r: r["example_id"])  # groups keep verifiers' example ids together
    assert sorted(map(json.dumps, (r["messages"] for r in rows))) == \
        sorted(json.dumps(r["prompt"] + r["completion"]) for r in by_slot)
    assert sorted(r["metadata"]["reward"] for r in rows) == sorted(r["reward"] for r in saved)
    assert {r["metadata"]["answer"] for r in rows} == {"1", "3", "5"}
    # one group per example: two samples each
    slots = query(store_path, "SELECT task_index, COUNT(*) FROM rollout GROUP BY task_index ORDER BY task_index")
    assert slots == [(0, 2), (1, 2), (2, 2)]
    assert query(store_path, "SELECT COUNT(*) FROM score WHERE name = 'correct' AND kind = 'metric'") == [(6,)]
    # the results.jsonl inside the folder is accepted too, and is the same content: refused
    again = cli("import", vf_results / "results.jsonl", "--format", "verifiers")
    assert_user_error(again, "already imported", out["run_id"])


_INSPECT_EVAL = '''
import sys
import inspect_ai.model._model as model_module
import inspect_ai.model._tokens as tokens_module

# Offline: inspect counts tokens with tiktoken, which downloads its encoding; count words instead.
def words(text):
    return max(1, len(text.split()))

tokens_module.count_text_tokens = model_module.count_text_tokens = words

from inspect_ai import Task, eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, get_model
from inspect_ai.scorer import includes
from inspect_ai.solver import generate

model = get_model("mockllm/model", custom_outputs=[ModelOutput.from_content("mockllm/model", "The answer is 4"),
                                                   ModelOutput.from_content("mockllm/model", "hello there")])
task = Task(name="tiny", dataset=[Sample(input="What is 2 + 2?", target="4", id="s1"),
                                  Sample(input="Say hi", target="hi", id="s2")],
            solver=[generate()], scorer=includes())
log = inspect_eval(task, model=model, log_dir=sys.argv[1], display="none", max_samples=1)[0]
assert log.status == "success", log.error
print(log.location)
'''


@pytest.fixture
def inspect_log(tmp_path: Path) -> Path:
    """A real Inspect AI ``.eval`` log: a two-sample task run on the built-in mock model."""
    pytest.importorskip("inspect_ai")
    script = write_file(tmp_path / "inspect_eval.py", _INSPECT_EVAL)
    proc = subprocess.run([sys.executable, script, tmp_path / "inspect-logs"], capture_output=True, text=True,
                          timeout=180, env={**os.environ, "INSPECT_LOG_LEVEL": "warning"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert path.suffix == ".eval" and path.is_file()
    return path


@pytest.mark.slow  # a real inspect_ai eval log (inspect_ai imported)
def test_inspect_log_round_trips_through_export(cli: Callable[..., Any], inspect_log: Path,
                                                store_path: Path) -> None:
    out = _import(cli, inspect_log, "--format", "inspect")
    assert out["rollouts"] == 2 and out["env"] == "tiny" and out["model"] == "mockllm/model"
    rows = _export(cli, out["run_id"])
    assert [r["messages"] for r in rows] == [
        [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "The answer is 4"}],
        [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "hello there"}]]
    assert [r["metadata"]["reward"] for r in rows] == [1.0, 0.0]  # includes(): C and I
    assert [r["metadata"]["answer"] for r in rows] == ["4", "hi"]
    assert query(store_path, "SELECT name, value FROM score ORDER BY id") == [("includes", 1.0), ("includes", 0.0)]


# -- an environment's rubric scores an import ----------------------------------------------------------
def test_env_ties_the_run_so_rescore_scores_it(cli: Callable[..., Any], tmp_path: Path, store_path: Path) -> None:
    env = write_file(tmp_path / "src" / "adder.py", ADDER_ENV)
    # first user turns that are the env's task prompts take those tasks (their answers); one is no task
    chats = [{"messages": [{"role": "user", "content": f"What is {i} + {i + 1}?"},
                           {"role": "assistant", "content": f"It is {2 * i + 1 + (i % 2)}"}]} for i in range(4)]
    chats.append({"messages": [{"role": "user", "content": "Tell me a joke"}, {"role": "assistant", "content": "no"}]})
    f = _jsonl(tmp_path / "prod.jsonl", chats)
    out = _import(cli, f, "--format", "openai-jsonl", "--env", env, "-a", '{"group_bonus": false}')
    assert out["env"] == "adder" and out["rollouts"] == 5 and out["rewarded"] == 0 and out["env_version"]
    assert out["matched"] == 4  # the joke matches no task
    assert query(store_path, "SELECT env_name FROM run WHERE id = ?", (out["run_id"],)) == [("adder",)]
    answers = query(store_path, "SELECT task_index, answer FROM rollout ORDER BY pk")
    assert answers[:4] == [(0, '"1"'), (1, '"3"'), (2, '"5"'), (3, '"7"')]
    assert answers[4][0] >= 20 and answers[4][1] == "null"  # not one of the env's 20 tasks
    res = cli("rescore", env, "--run", out["run_id"], "--json")
    assert res.rc == 0, res.stderr
    r = last_json(res.stdout)
    # the joke matches no task: skipped with that reason, not scored 0 against no answer
    assert r["rescored"] == 4 and list(r["skipped"].values()) == [1]
    assert "matches no task" in next(iter(r["skipped"]))
    assert r["after"]["mean"] == pytest.approx(2 / 4)  # tasks 0 and 2 are right
    assert r["changed"] == 4  # none had a reward before


# -- never twice ---------------------------------------------------------------------------------------
def test_the_same_file_twice_is_refused(cli: Callable[..., Any], tmp_path: Path, store_path: Path) -> None:
    f = _jsonl(tmp_path / "chats.jsonl", CONVERSATIONS)
    first = _import(cli, f, "--format", "openai-jsonl")
    copy = _jsonl(tmp_path / "elsewhere" / "copy.jsonl", CONVERSATIONS)  # same bytes, another name
    for path in (f, copy):
        assert_user_error(cli("import", path, "--format", "openai-jsonl"), "already imported", first["run_id"])
    assert query(store_path, "SELECT COUNT(*) FROM rollout") == [(3,)]
    assert query(store_path, "SELECT COUNT(*) FROM run") == [(1,)]
    _jsonl(f, [*CONVERSATIONS, CONVERSATIONS[0]])  # changed content is another import
    assert _import(cli, f, "--format", "openai-jsonl")["rollouts"] == 4


# -- bad input -----------------------------------------------------------------------------------------
GOOD = json.dumps(CONVERSATIONS[2])
NO_ASSISTANT = json.dumps({"messages": [{"role": "user", "content": "hello?"}]})


def _setup(kind: str, tmp_path: Path) -> Path:
    """The input file of one bad-input case."""
    d = tmp_path / "in"
    d.mkdir(exist_ok=True)
    if kind == "empty":
        return _jsonl(d / "empty.jsonl", [])
    if kind == "blank":
        (d / "blank.jsonl").write_text("\n\n  \n")
        return d / "blank.jsonl"
    if kind == "missing":
        return d / "nope.jsonl"
    if kind == "not-chat":
        return _jsonl(d / "rows.jsonl", [{"question": "q", "answer": "a"}, {"question": "r"}])
    if kind == "zip":
        (d / "log.eval").write_bytes(b"PK\x03\x04" + b"\x00" * 64)
        return d / "log.eval"
    if kind == "truncated":
        text = GOOD + "\n" + GOOD[: len(GOOD) // 2]
        (d / "cut.jsonl").write_text(text)
        return d / "cut.jsonl"
    if kind == "one-bad":
        return _jsonl(d / "mixed.jsonl", [GOOD, "{not json", GOOD, '{"messages": "hi"}', GOOD, "[1, 2]"])
    if kind == "no-assistant":
        return _jsonl(d / "noasst.jsonl", [GOOD, NO_ASSISTANT, GOOD])
    if kind == "only-no-assistant":
        return _jsonl(d / "noasst.jsonl", [NO_ASSISTANT])
    if kind == "plain-dir":
        write_file(d / "folder" / "notes.txt", "hello")
        return d / "folder"
    if kind == "jsonl-as-vf":
        return _jsonl(d / "chats.jsonl", [GOOD])
    if kind == "vf-dir-bad-rows":
        write_file(d / "vf" / "metadata.json", '{"env_id": "x", "model": "m"}')
        _jsonl(d / "vf" / "results.jsonl", [GOOD])
        return d / "vf"
    raise AssertionError(kind)


ERRORS = [  # (input, --format, fragments of the one error line)
    ("empty", "openai-jsonl", ["empty", "no conversations"]),
    ("blank", "openai-jsonl", ["no conversations"]),
    ("missing", "openai-jsonl", ["does not exist"]),
    ("missing", "inspect", ["does not exist"]),
    ("not-chat", "openai-jsonl", ["nothing in", "line 1: no 'messages' field", "1 more bad"]),
    ("zip", "openai-jsonl", ["zip archive", "--format inspect"]),
    ("jsonl-as-vf", "inspect", ["not a readable Inspect AI log"]),
    ("jsonl-as-vf", "verifiers", ["not a verifiers results directory"]),
    ("plain-dir", "verifiers", ["not a verifiers results directory", "results.jsonl and metadata.json"]),
    ("plain-dir", "openai-jsonl", ["is a directory"]),
    ("plain-dir", "inspect", ["is a directory"]),
    ("vf-dir-bad-rows", "verifiers", ["nothing in", "no example_id", "another --format"]),
    ("only-no-assistant", "openai-jsonl", ["line 1", "no assistant turn"]),
]


@pytest.mark.parametrize(("kind", "fmt", "fragments"), ERRORS, ids=[f"{k}-{f}" for k, f, _ in ERRORS])
def test_bad_input_is_one_clear_line(cli: Callable[..., Any], tmp_path: Path, store_path: Path, kind: str, fmt: str,
                                     fragments: list[str]) -> None:
    path = _setup(kind, tmp_path)
    assert_user_error(cli("import", path, "--format", fmt), *fragments)
    if store_path.exists():
        assert query(store_path, "SELECT COUNT(*) FROM run") == [(0,)]  # nothing half-imported
        assert query(store_path, "SELECT COUNT(*) FROM rollout") == [(0,)]


PARTIAL = [  # (input, conversations imported, {bad line: fragment of its reason})
    ("truncated", 1, {2: "cut off"}),
    ("one-bad", 3, {2: "not valid JSON", 4: "not a non-empty list", 6: "not a JSON object"}),
    ("no-assistant", 2, {2: "no assistant turn"}),
]


@pytest.mark.parametrize(("kind", "imported", "bad"), PARTIAL, ids=[k for k, _, _ in PARTIAL])
def test_bad_lines_are_reported_and_good_ones_kept(cli: Callable[..., Any], tmp_path: Path, store_path: Path,
                                                   kind: str, imported: int, bad: dict[int, str]) -> None:
    path = _setup(kind, tmp_path)
    out = _import(cli, path, "--format", "openai-jsonl")
    assert out["rollouts"] == imported and out["skipped"] == len(bad)
    assert {p["line"]: p["reason"] for p in out["problems"]}.keys() == bad.keys()
    for p in out["problems"]:
        assert bad[p["line"]] in p["reason"], p
    assert query(store_path, "SELECT COUNT(*) FROM rollout") == [(imported,)]
    stored = json.loads(query(store_path, "SELECT config FROM run")[0][0])["import"]
    assert [p["line"] for p in stored["problems"]] == sorted(bad) and stored["skipped"] == len(bad)
    # people see each bad line by its number
    path2 = _jsonl(tmp_path / "again" / path.name, [*path.read_text().splitlines(), GOOD])
    res = cli("import", path2, "--format", "openai-jsonl")
    assert res.rc == 0, res.stderr
    for line in bad:
        assert f"line {line}:" in res.stdout


# -- the store -----------------------------------------------------------------------------------------
def test_an_older_store_opens_and_its_rollouts_are_model_rollouts(tmp_path: Path) -> None:
    path = tmp_path / "v6.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
    for i, migrate in enumerate(MIGRATIONS[:6]):
        migrate(conn)
        conn.execute(f"PRAGMA user_version={i + 1}")
    conn.execute("INSERT INTO run (id, kind, env_name, env_version, env_source, env_args, model, base_url, harness, "
                 "runtime, n_tasks, rollouts_per_task, concurrency, sampling, config, status, error, created_at, "
                 "summary) VALUES ('r', 'eval', 'e', '', '', '{}', 'm', '', '', '', 1, 1, 1, '{}', '{}', "
                 "'completed', '', 0, '{}')")
    conn.execute("INSERT INTO rollout (pk, id, run_id, env_name, model, task_id, task_index, sample_index, status, "
                 "reward, prompt_tokens, completion_tokens, cost_usd, duration_s, turns, created_at, prompt, answer, "
                 "info, completion, messages, state) VALUES (1, 'r.0.0', 'r', 'e', 'm', 't', 0, 0, 'ok', 1.0, 0, 0, "
                 "0, 0, 1, 0, '\"q\"', 'null', '{}', 'a', '[]', '{}')")
    conn.close()
    with Store(path) as s:
        assert s.conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        assert [tuple(r) for r in s.conn.execute("SELECT source FROM rollout")] == [("model",)]
        assert count_rollouts(s.conn, RolloutFilter(source="model")) == 1
        assert count_rollouts(s.conn, RolloutFilter(source="human")) == 0


def test_bench_import_runs(tmp_path: Path) -> None:
    """The benchmark script runs end to end on a small file (its speed is measured by running it, not here)."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "bench_import.py"
    proc = subprocess.run([sys.executable, script, "--n", "2000", "--dir", tmp_path, "--json"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["conversations"] == 2000 and out["conversations_per_s"] > 0


def test_help_names_the_formats(cli: Callable[..., Any]) -> None:
    res = cli("import", "--help")
    assert res.rc == 0
    assert all(f in res.stdout for f in ("openai-jsonl", "verifiers", "inspect", "--env", "--model", "--json"))
