"""Hostile input to ``workbench import`` and ``rescore`` of what it stored: files that are not files,
conversations of the wrong shape, a writer process killed mid-import, non-finite rewards, conversations
that match no task, and a fuzz of every ``--format``. Each case drives the real CLI as a subprocess and
asserts the one line, the exit code, and that nothing stored changed (row counts, ``PRAGMA
integrity_check``).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ADDER_ENV, assert_user_error, last_json, query, workbench_argv, write_file

# slow: a CLI process per hostile file, writers killed mid-import
pytestmark = pytest.mark.slow

TABLES = ("run", "rollout", "score", "rollout_fts")
GOOD = {"messages": [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "5"}],
        "reward": 1.0}
BASELINE = [GOOD, {**GOOD, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}]


def snapshot(db: Path) -> dict[str, Any]:
    """Row counts of the store's tables, its runs and its integrity check (what "nothing changed" compares)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        counts: dict[str, Any] = {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}
        counts["integrity"] = conn.execute("PRAGMA integrity_check").fetchone()[0]
        counts["runs"] = sorted(conn.execute("SELECT id, status FROM run").fetchall())
        return counts
    finally:
        conn.close()


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture
def baseline(cli: Callable[..., Any], tmp_path: Path, store_path: Path) -> dict[str, Any]:
    """A store that already holds one imported run: what every refused import must leave as it is."""
    out = cli("import", _jsonl(tmp_path / "baseline.jsonl", BASELINE), "--format", "openai-jsonl", "--json")
    assert out.rc == 0, out.stderr
    snap = snapshot(store_path)
    assert snap["rollout"] == 2 and snap["integrity"] == "ok"
    return snap


# -- files that are not files ------------------------------------------------------------------------------
def _special(kind: str, tmp_path: Path) -> Path:
    if kind == "char-device":
        return Path("/dev/zero")
    if kind == "fifo":
        path = tmp_path / "pipe.jsonl"
        os.mkfifo(path)
        return path
    if kind == "fifo-link":  # a link is judged by what it points at
        os.mkfifo(tmp_path / "pipe2")
        (tmp_path / "link.jsonl").symlink_to(tmp_path / "pipe2")
        return tmp_path / "link.jsonl"
    if kind == "socket":
        import socket

        path = tmp_path / "sock.jsonl"
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
        return path
    raise AssertionError(kind)


KINDS = [  # (what, --format, the kind the line names)
    ("char-device", "openai-jsonl", "character device"),
    ("char-device", "verifiers", "character device"),
    ("char-device", "inspect", "character device"),
    ("fifo", "openai-jsonl", "named pipe"),
    ("fifo", "verifiers", "named pipe"),
    ("fifo", "inspect", "named pipe"),
    ("fifo-link", "openai-jsonl", "named pipe"),
    ("socket", "openai-jsonl", "socket"),
]


@pytest.mark.parametrize(("kind", "fmt", "named"), KINDS, ids=[f"{k}-{f}" for k, f, _ in KINDS])
def test_a_file_that_is_not_a_regular_file_is_refused_by_kind(cli: Callable[..., Any], tmp_path: Path, store_path: Path,
                                                              baseline: dict[str, Any], kind: str, fmt: str,
                                                              named: str) -> None:
    path = _special(kind, tmp_path)
    # today /dev/zero is read forever and a named pipe blocks: the timeout fails the test instead of hanging it
    assert_user_error(cli("import", path, "--format", fmt, timeout=60), named, "not a regular file")
    assert snapshot(store_path) == baseline


def test_a_line_past_the_limit_is_a_bad_line_read_in_bounded_pieces(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.runs import import_formats

    monkeypatch.setattr(import_formats, "MAX_LINE_BYTES", 4096)
    huge = json.dumps({**GOOD, "metadata": {"pad": "x" * 50_000}})
    path = _jsonl(tmp_path / "long.jsonl", [GOOD, huge, GOOD])
    _, rows = import_formats.read_openai_jsonl(path)
    out = list(rows)
    assert [type(r).__name__ for r in out] == ["Conversation", "Problem", "Conversation"]
    assert out[1].line == 2 and "over" in out[1].reason and out[2].where == "line 3"


# -- conversations of the wrong shape ------------------------------------------------------------------------
def _deep(n: int) -> dict[str, Any]:
    d: dict[str, Any] = {}
    cur = d
    for _ in range(n):
        cur["a"] = {}
        cur = cur["a"]
    return d


def _msgs(assistant: dict[str, Any], user: Any = "What is 0 + 1?") -> list[dict[str, Any]]:
    return [{"role": "user", "content": user}, {"role": "assistant", **assistant}]


SHAPES = [  # (case, the conversation, fragments of its reason)
    ("tool-call-a-string", {"messages": _msgs({"content": None, "tool_calls": ["add(1, 2)"]})},
     ["tool call 0", "function name"]),
    ("tool-calls-a-number", {"messages": _msgs({"content": None, "tool_calls": 5})}, ["'tool_calls'", "not a list"]),
    ("tool-call-name-a-number", {"messages": _msgs({"content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": 7, "arguments": "{}"}}]})}, ["function name"]),
    ("tool-call-arguments-a-list", {"messages": _msgs({"content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "add", "arguments": [1, 2]}}]})}, ["arguments"]),
    ("content-parts-numbers", {"messages": _msgs({"content": "ok"}, user=[1, 2])}, ["content part 0"]),
    ("text-part-not-text", {"messages": _msgs({"content": [{"type": "text", "text": 5}]})},
     ["content part 0", "'text'"]),
    ("role-a-list", {"messages": [{"role": ["user"], "content": "hi"}, {"role": "assistant", "content": "x"}]},
     ["valid role"]),
    ("metadata-300-deep", {"messages": _msgs({"content": "1"}), "metadata": _deep(300)}, ["nested too deeply"]),
    ("info-a-list", {"messages": _msgs({"content": "1"}), "metadata": {"info": [1, 2]}}, ["'info' is not an object"]),
    ("rewards-past-float-range", {"messages": _msgs({"content": "1"}), "rewards": {"a": 1e308, "b": 1e308}},
     ["non-finite"]),
]


@pytest.mark.parametrize(("case", "conversation", "fragments"), SHAPES, ids=[c for c, _, _ in SHAPES])
def test_a_conversation_of_the_wrong_shape_is_one_clear_line(cli: Callable[..., Any], tmp_path: Path,
                                                             store_path: Path, baseline: dict[str, Any], case: str,
                                                             conversation: dict[str, Any],
                                                             fragments: list[str]) -> None:
    env = write_file(tmp_path / "src" / "adder.py", ADDER_ENV)  # with an environment, the task takes its info
    alone = _jsonl(tmp_path / "bad.jsonl", [conversation])
    for extra in ([], ["--env", env]):
        line = assert_user_error(cli("import", alone, "--format", "openai-jsonl", *extra), "line 1", *fragments)
        assert "nothing in" in line
        assert snapshot(store_path) == baseline  # nothing half-stored
    # among good lines: the bad one is reported by its number, the good ones are kept
    mixed = _jsonl(tmp_path / "mixed.jsonl", [{**GOOD, "id": "a"}, conversation, {**GOOD, "id": "b"}])
    res = cli("import", mixed, "--format", "openai-jsonl", "--env", env, "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["rollouts"] == 2 and [p["line"] for p in out["problems"]] == [2]
    assert all(f.lower() in out["problems"][0]["reason"].lower() for f in fragments), out["problems"]
    after = snapshot(store_path)
    assert after["rollout"] == baseline["rollout"] + 2 and after["integrity"] == "ok"


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def _written(pid: int) -> int:
    """Bytes the process has written (the importing process writes only its rows, into the writer's pipe)."""
    try:
        io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    except OSError:
        return 0
    return int(io["wchar"])


def test_the_writer_process_killed_mid_import_is_one_line_and_nothing_stored(tmp_path: Path, store_path: Path,
                                                                             cli_env: dict[str, str],
                                                                             baseline: dict[str, Any]) -> None:
    row = json.dumps({"messages": [{"role": "user", "content": "q" * 100}, {"role": "assistant", "content": "a" * 100}]})
    path = tmp_path / "big.jsonl"
    path.write_text("".join(row.replace("q" * 6, f"{i:06d}", 1) + "\n" for i in range(150_000)))
    proc = subprocess.Popen([*workbench_argv(), "import", str(path), "--format", "openai-jsonl"], env=cli_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = False
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and not killed:
            for child in _children(proc.pid):
                try:
                    cmd = Path(f"/proc/{child}/cmdline").read_bytes()
                except OSError:
                    continue
                # rows are flowing (megabytes of them went down the pipe): the writer's transaction is open,
                # nothing is committed yet, and most rows are still to come
                if b"workbench.store.imports" in cmd and _written(proc.pid) > 4_000_000:
                    os.kill(child, signal.SIGKILL)
                    killed = True
            time.sleep(0.005)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed, "the writer process was never seen taking rows"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode != 0 and "Traceback" not in err and len(lines) == 1, err
    assert "import writer stopped" in lines[0] and "nothing was imported" in lines[0]
    assert snapshot(store_path) == baseline


# -- non-finite rewards -----------------------------------------------------------------------------------
_INSPECT_HUGE = '''
import sys
import inspect_ai.model._model as model_module
import inspect_ai.model._tokens as tokens_module

def words(text):
    return max(1, len(text.split()))

tokens_module.count_text_tokens = model_module.count_text_tokens = words

from inspect_ai import Task, eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, get_model
from inspect_ai.scorer import Score, mean, scorer
from inspect_ai.solver import generate

def huge_for(big):
    @scorer(metrics=[mean()], name=f"score_{big}")
    def make():
        async def score(state, target):
            return Score(value=1e308 if state.sample_id == "s1" else 0.5)
        return score
    return make()

model = get_model("mockllm/model", custom_outputs=[ModelOutput.from_content("mockllm/model", "a"),
                                                   ModelOutput.from_content("mockllm/model", "b")])
task = Task(name="huge", dataset=[Sample(input="one", target="a", id="s1"), Sample(input="two", target="b", id="s2")],
            solver=[generate()], scorer=[huge_for(1), huge_for(2)])
log = inspect_eval(task, model=model, log_dir=sys.argv[1], display="none", max_samples=1)[0]
assert log.status == "success", log.error
print(log.location)
'''


def test_non_finite_rewards_are_refused_per_row_never_stored(cli: Callable[..., Any], tmp_path: Path,
                                                             store_path: Path) -> None:
    pytest.importorskip("inspect_ai")
    script = write_file(tmp_path / "inspect_huge.py", _INSPECT_HUGE)
    proc = subprocess.run([sys.executable, script, tmp_path / "logs"], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "INSPECT_LOG_LEVEL": "warning"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = Path(proc.stdout.strip().splitlines()[-1])
    chat = {"messages": GOOD["messages"]}
    jsonl = _jsonl(tmp_path / "sums.jsonl", [GOOD, {**chat, "rewards": {"a": 1e308, "b": 1e308}},
                                             {**chat, "rewards": {"a": 1e308, "b": -1e308, "c": 2.0}}])
    for path, fmt, kept, bad in ((log, "inspect", 1, "sample s1"), (jsonl, "openai-jsonl", 2, "line 2")):
        res = cli("import", path, "--format", fmt, "--json")
        assert res.rc == 0, res.stderr
        out = last_json(res.stdout)
        assert out["rollouts"] == kept and [p["where"] for p in out["problems"]] == [bad + (" (epoch 1)" if
                                                                                        fmt == "inspect" else "")]
        assert "non-finite" in out["problems"][0]["reason"]
        assert out["mean_reward"] is not None and math.isfinite(out["mean_reward"])
    values = [v for (v,) in query(store_path, "SELECT value FROM score")] + \
        [v for (v,) in query(store_path, "SELECT reward FROM rollout WHERE reward IS NOT NULL")]
    assert values and all(math.isfinite(v) for v in values)
    res = cli("runs")
    assert res.rc == 0 and "inf" not in res.stdout.lower()


# -- conversations that match no task ---------------------------------------------------------------------
MATCHES = [  # (prompts: which are task prompts of the env, matched, unmatched)
    (["What is 0 + 1?", "What is 1 + 2?", "Tell me a joke"], 2, 1),
    (["Tell me a joke", "Sing"], 0, 2),
    (["What is 3 + 4?"], 1, 0),
]


@pytest.mark.parametrize(("prompts", "matched", "unmatched"), MATCHES, ids=["some", "none", "all"])
def test_conversations_that_match_no_task_are_counted_and_not_rescored(cli: Callable[..., Any], tmp_path: Path,
                                                                       store_path: Path, prompts: list[str],
                                                                       matched: int, unmatched: int) -> None:
    env = write_file(tmp_path / "src" / "adder.py", ADDER_ENV)
    chats = [{"messages": [{"role": "user", "content": p}, {"role": "assistant", "content": "It is 1"}]} for p in prompts]
    path = _jsonl(tmp_path / "prod.jsonl", chats)
    res = cli("import", path, "--format", "openai-jsonl", "--env", env)
    assert res.rc == 0, res.stderr
    assert f"{matched} of {len(prompts)} conversations matched a task of adder" in res.stdout
    assert ("matched none" in res.stdout) == bool(unmatched)
    run = query(store_path, "SELECT id FROM run")[0][0]
    before = snapshot(store_path)
    res = cli("rescore", env, "--run", run, "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["rescored"] == matched
    assert sum(n for reason, n in out["skipped"].items() if "matches no task" in reason) == unmatched
    text = cli("rescore", env, "--run", run)
    assert text.rc == 0 and ("matches no task" in text.stdout) == bool(unmatched)
    assert snapshot(store_path) == before  # without --apply nothing is written


# -- verifiers ToolEnv results, and SFT exports that load together ----------------------------------------
_VF_TOOL_EVAL = '''
import asyncio, os, sys
from pathlib import Path
from datasets import Dataset
import verifiers as vf
from verifiers.legacy.types import ClientConfig

def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b

def correct(completion, answer, **kw):
    return 1.0 if str(answer) in (completion[-1].get("content") or "") else 0.0

async def main(url, out):
    ds = Dataset.from_list([{"question": "What is 2 + 3?", "answer": "5"}])
    env = vf.ToolEnv(tools=[add], dataset=ds, eval_dataset=ds, rubric=vf.Rubric(funcs=[correct]), max_turns=4)
    os.environ["VF_MOCK_KEY"] = "x"
    client = ClientConfig(api_base_url=url, api_key_var="VF_MOCK_KEY", max_retries=0)
    await env.evaluate(client=client, model="mock-model", num_examples=1, rollouts_per_example=2,
                       results_path=Path(out), save_results=True)

asyncio.run(main(sys.argv[1], sys.argv[2]))
'''
ADD_CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}


def _legacy_verifiers_python() -> Path:
    """verifiers 0.3's interpreter (the legacy format's own environment, built by uv on first use): verifiers'
    own evaluate writes the results folder."""
    from workbench.frameworks.legacy_source import DEFAULT
    from workbench.frameworks.verifiers_legacy import framework

    return framework(DEFAULT).ensure()


@pytest.fixture
def vf_tool_results(mock_server: Callable[..., Any], tmp_path: Path) -> Path:
    """A real ``vf-eval -s`` results folder of a verifiers ToolEnv: the model calls ``add``, then answers."""
    python = _legacy_verifiers_python()
    server = mock_server("script", "--by-turn", script=[{"tool_calls": [ADD_CALL]}, "The answer is 5"])
    out = tmp_path / "vf-tool"
    script = write_file(tmp_path / "vf_tool.py", _VF_TOOL_EVAL)
    proc = subprocess.run([str(python), script, server.base_url, out], capture_output=True, text=True, timeout=180,
                          env={k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all(isinstance(tc, str) for r in saved for m in r["completion"] for tc in m.get("tool_calls") or ())
    return out


def test_a_verifiers_tool_env_imports_and_exports_with_its_tools(cli: Callable[..., Any], vf_tool_results: Path,
                                                                  tmp_path: Path, store_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    tool_run = cli("import", vf_tool_results, "--format", "verifiers", "--json")
    assert tool_run.rc == 0, tool_run.stderr  # today: a traceback (tool calls saved as JSON strings)
    out = last_json(tool_run.stdout)
    assert out["rollouts"] == 2 and out["skipped"] == 0
    plain = _jsonl(tmp_path / "plain.jsonl", [{"messages": [{"role": "user", "content": f"q{i}"},
                                                            {"role": "assistant", "content": f"a{i}"}]}
                                              for i in range(3)])
    plain_run = last_json(cli("import", plain, "--format", "openai-jsonl", "--json").stdout)
    files = []
    for run in (plain_run["run_id"], out["run_id"]):
        path = tmp_path / f"{run}.jsonl"
        res = cli("export", run, "-o", path)
        assert res.rc == 0, res.stderr
        files.append(str(path))
    rows = [json.loads(line) for line in Path(files[1]).read_text().splitlines()]
    calls = rows[0]["messages"][1]["tool_calls"]
    assert calls == [{"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]
    tools = json.loads(rows[0]["tools"])
    assert [t["function"]["name"] for t in tools] == ["add"] and tools[0]["type"] == "function"
    meta = json.loads(rows[0]["metadata"])
    assert meta["reward"] == 1.0 and meta["answer"] == "5" and meta["source"] == "imported"
    # the files of both runs load together, whichever comes first: one schema
    for order in (files, files[::-1]):
        ds = datasets.load_dataset("json", data_files=order, split="train", cache_dir=str(tmp_path / "hf"))
        assert len(ds) == 5
        assert ds.features["metadata"] == datasets.Value("string") and ds.features["tools"] == datasets.Value("string")
        by_run = {json.loads(r["metadata"])["run_id"]: r for r in ds}
        tool_row = by_run[out["run_id"]]
        assert tool_row["messages"][1]["tool_calls"][0]["function"]["name"] == "add"
        assert json.loads(tool_row["tools"])[0]["function"]["name"] == "add"
        assert json.loads(by_run[plain_run["run_id"]]["tools"]) == []


# -- verifiers v1 environments: named for what they are -----------------------------------------------------
_V1_PACKAGE = '''
import verifiers.v1 as vf1


class CountingTaskset(vf1.Taskset):
    def load(self):
        return []


__all__ = ["CountingTaskset"]
'''
_V1_RETURNED = '''
import verifiers.v1 as vf1


class CountingTaskset(vf1.Taskset):
    def load(self):
        return []


def load_environment():
    return CountingTaskset(vf1.TasksetConfig())
'''
#: A package exporting its Taskset is run by the verifiers v1 format (in verifiers 0.4's own environment, built
#: on first use: slow), which refuses an empty taskset; a load_environment returning a v1 object is named by the
#: legacy format (in verifiers 0.3's own environment, built on first use: slow).
V1 = [pytest.param("package", "v1pkg/__init__.py", _V1_PACKAGE, ("yields no tasks",), id="package",
                   marks=pytest.mark.slow),
      pytest.param("returned", "v1ret.py", _V1_RETURNED, ("verifiers v1 taskset", "not support"), id="returned",
                   marks=pytest.mark.slow)]


@pytest.mark.parametrize(("case", "name", "source", "fragments"), V1)
def test_a_verifiers_v1_environment_is_named_for_what_it_is(cli: Callable[..., Any], tmp_path: Path, store_path: Path,
                                                            case: str, name: str, source: str,
                                                            fragments: tuple[str, ...]) -> None:
    from workbench.frameworks.venvs import frameworks_dir

    path = write_file(tmp_path / "envs" / name, source)
    target = path.parent if name.endswith("__init__.py") else path
    env = {"WORKBENCH_FRAMEWORKS_DIR": str(frameworks_dir())}
    line = assert_user_error(cli("eval", target, "-n", "1", env=env, timeout=300), "CountingTaskset", *fragments)
    assert "defines no load_environment" not in line
    assert not store_path.exists() or query(store_path, "SELECT COUNT(*) FROM run") == [(0,)]


# -- the embedded model's template: assistant tokens marked, rendering unchanged ---------------------------
ADD_TOOL = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}}}}}
TOOLS_HEAD = ('<|im_start|>system\nTools:\n{"name": "add", "parameters": {"type": "object", "properties": {"a": '
              '{"type": "integer"}}}}\nTo call a tool reply <tool_call>{"name": NAME, "arguments": ARGS}</tool_call>'
              '<|im_end|>\n')
CALL_TEXT = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call><|im_end|>'
TEMPLATE_CASES = [  # (messages, tools, the full rendering as the template rendered it before the markers,
    #                  the rendering of all but the last message with the generation prompt, the assistant's text)
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
      {"role": "assistant", "content": "4"}], None,
     "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n",
     "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n",
     "4<|im_end|>"),
    ([{"role": "user", "content": "add 2 and 3"},
      {"role": "assistant", "content": None, "tool_calls": [
          {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "5"}, {"role": "assistant", "content": "It is 5"}], [ADD_TOOL],
     TOOLS_HEAD + "<|im_start|>user\nadd 2 and 3<|im_end|>\n<|im_start|>assistant\n" + CALL_TEXT
     + "\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\nIt is 5<|im_end|>\n",
     TOOLS_HEAD + "<|im_start|>user\nadd 2 and 3<|im_end|>\n<|im_start|>assistant\n" + CALL_TEXT
     + "\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n",
     CALL_TEXT + "It is 5<|im_end|>"),
]


@pytest.mark.parametrize("case", range(len(TEMPLATE_CASES)))
def test_the_embedded_models_template_marks_the_assistant_and_renders_as_before(tiny_dir: Path, case: int) -> None:
    """TRL's ``assistant_only_loss`` needs ``{% generation %}`` markers (``return_assistant_tokens_mask``);
    the text the template renders stays byte for byte what it was, for the server and the fast tokenizer."""
    from transformers import AutoTokenizer
    from workbench_local.models.fast_tokenizer import FastTokenizer

    messages, tools, full, prompt, assistant = TEMPLATE_CASES[case]
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    fast = FastTokenizer(tiny_dir)
    for t in (tok, fast):
        assert t.apply_chat_template(messages, tools=tools, tokenize=False) == full
        assert t.apply_chat_template(messages[:-1], tools=tools, tokenize=False, add_generation_prompt=True) == prompt
    out = tok.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=True,
                                  return_assistant_tokens_mask=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    assert len(mask) == len(ids) and any(mask)
    assert tok.decode([i for i, m in zip(ids, mask, strict=True) if m]) == assistant
    assert ids == fast.encode(full)


def test_an_sft_row_of_a_model_rollout_carries_the_tools_its_calls_sent(cli: Callable[..., Any],
                                                                        mock_server: Callable[..., Any],
                                                                        tmp_path: Path) -> None:
    server = mock_server("instant", "--tokens")  # a token-returning server: the trace keeps each call's tools
    res = cli("eval", "doc_search", "-m", "mock-model", "--base-url", server.base_url, "-n", "1", "--json")
    assert res.rc == 0, res.stderr
    run = last_json(res.stdout)["run_id"]
    exp = cli("export", run)
    assert exp.rc == 0, exp.stderr
    [row] = [json.loads(line) for line in exp.stdout.splitlines() if line.strip()]
    assert [t["function"]["name"] for t in json.loads(row["tools"])] == ["search", "read"]
    assert json.loads(row["metadata"])["env"] == "doc_search"


def test_an_inspect_log_that_unpacks_past_the_limit_is_refused_before_it_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import zipfile

    from workbench.errors import ConfigError
    from workbench.runs import import_inspect

    monkeypatch.setattr(import_inspect, "MAX_LOG_BYTES", 1 << 20)
    path = tmp_path / "bomb.eval"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("samples/1_epoch_1.json", b"0" * (4 << 20))  # 4 MiB of zeros, a few KiB packed
    assert path.stat().st_size < 1 << 20
    with pytest.raises(ConfigError, match="unpacks to .* over the"):
        import_inspect.read_inspect(path)
