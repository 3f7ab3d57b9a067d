"""verifiers environments (the legacy 0.3.x API of the Environments Hub) run unchanged by Workbench.

Each environment under tests/fixtures/verifiers_envs is a module with ``load_environment``, as Hub
environments are written. It is evaluated twice against the same scripted mock model (two fresh mock
processes with the same script, one rollout at a time, so both see the same replies in the same order):
by verifiers' own ``env.evaluate`` (tests/fixtures/verifiers_envs/vf_reference.py, in its own process of
verifiers 0.3's environment), and by ``workbench eval``, which runs it in a worker of that same environment
(``workbench.frameworks.verifiers_legacy``); the reward and every function's score must be equal per
rollout. Everything is real: the verifiers package in the environment uv builds for it (once per machine),
processes, HTTP on 127.0.0.1 through Workbench's interception proxy, the SQLite store.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO, CliResult, last_json, run_workbench

# slow: builds verifiers 0.3's environment on a fresh machine; each case imports verifiers and datasets in
# fresh processes and runs two evals
pytestmark = pytest.mark.slow

FIXTURES = REPO / "tests" / "fixtures" / "verifiers_envs"


@pytest.fixture(scope="session")
def legacy_python() -> Path:
    """verifiers 0.3's interpreter (the legacy format's default), built by uv on first use, then cached."""
    from workbench.frameworks.legacy_source import DEFAULT
    from workbench.frameworks.verifiers_legacy import framework

    return framework(DEFAULT).ensure()


@pytest.fixture(scope="session")
def legacy_version(legacy_python: Path) -> str:
    p = subprocess.run([str(legacy_python), "-c", "import verifiers; print(verifiers.__version__)"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return f"verifiers {p.stdout.strip()}"


def frameworks_env() -> dict[str, str]:
    """The machine's framework environments and uv cache for a CLI run (tests give each run private XDG
    folders, where they would be built again)."""
    from workbench.frameworks.venvs import frameworks_dir

    env = {"WORKBENCH_FRAMEWORKS_DIR": str(frameworks_dir())}
    uv = shutil.which("uv")
    p = subprocess.run([uv, "cache", "dir"], capture_output=True, text=True, timeout=60) if uv else None
    if p is not None and p.returncode == 0 and p.stdout.strip():
        env["UV_CACHE_DIR"] = p.stdout.strip()
    return env


@pytest.fixture
def cli(cli_env: dict[str, str], tmp_path: Path, legacy_python: Path) -> Callable[..., CliResult]:
    """``workbench`` with the machine's framework environments (verifiers 0.3's is built by then)."""

    def run(*args: Any, env: dict[str, str] | None = None, timeout: float = 300.0,
            cwd: Path | None = None) -> CliResult:
        return run_workbench(args, {**cli_env, **frameworks_env(), **(env or {})}, timeout=timeout, cwd=cwd or tmp_path)

    return run


def reference_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}


def _call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


#: (env file, tasks, rollouts per task, the mock's script): the replies exercise right and wrong answers, the
#: parser's format reward, the game's feedback and stop condition, tool calls (parallel ones, one that
#: raises), tools with injected state, a group reward over a task's rollouts, a reward that raises.
PARITY = {
    "single": ("vf_single.py", 4, 1, [
        "<think>1 plus 0</think>\n<answer>1</answer>", "<answer>4</answer>", "no tags at all 5",
        "<think>x</think><answer>7</answer>"]),
    "game": ("vf_game.py", 3, 1, ["5", "3", "5", "4", "hmm", "9", "5"]),
    "tools": ("vf_tools.py", 3, 1, [
        {"tool_calls": [_call(1, "add", {"a": 0, "b": 10})]}, "The answer is 10",
        {"tool_calls": [_call(2, "lookup", {"key": "zz"}), _call(3, "add", {"a": 1, "b": 10})]}, "It is 11",
        "I guess 99"]),
    "stateful tools": ("vf_stateful.py", 2, 1, [
        {"tool_calls": [_call(1, "write", {"text": "apple"})]}, {"tool_calls": [_call(2, "read", {})]}, "apple",
        "pear, I did not write it"]),
    "group reward": ("vf_group.py", 2, 2, ["0", "The answer is 0", "2", "It is 5"]),
    "raising": ("vf_raising.py", 4, 1, ["<answer>0</answer>", "<answer>3</answer>", "<answer>0</answer>", "x"]),
}


def verifiers_reference(python: Path, env_file: Path, base_url: str, n: int, r: int,
                        *env_args: str) -> list[dict[str, Any]]:
    """verifiers' own evaluation of ``env_file`` in verifiers' interpreter ``python`` (``r`` rollouts per
    task, one task at a time), per rollout."""
    p = subprocess.run([str(python), str(FIXTURES / "vf_reference.py"), str(env_file), base_url, str(n), str(r), "1",
                        *env_args], capture_output=True, text=True, timeout=300, cwd=REPO, env=reference_env())
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])["outputs"]


def _texts(messages: list[Any]) -> list[str]:
    return [(m.get("content") if isinstance(m, dict) else m) or "" for m in messages]


def _pairs(ref: list[dict[str, Any]], mine: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each stored rollout with verifiers' rollout of the same task that held the same conversation (the
    completion, message by message, is the one verifiers held)."""
    left = list(ref)
    pairs = []
    for ours in mine:
        completion = _texts(ours["messages"][len(ours["prompt"]):])
        match = next((o for o in left if o["example_id"] == ours["task_index"] and _texts(o["completion"]) == completion),
                     None)
        assert match is not None, (ours, [o for o in left if o["example_id"] == ours["task_index"]])
        left.remove(match)
        pairs.append((ours, match))
    assert not left
    return pairs


def stored(store_path: Path, run_id: str) -> list[dict[str, Any]]:
    """Each stored rollout of the run, by task: its reward, scores by name, messages, state and errors."""
    conn = sqlite3.connect(store_path)
    try:
        rows = conn.execute("SELECT pk, task_index, reward, messages, state, status, prompt FROM rollout WHERE run_id = ? "
                            "ORDER BY task_index, sample_index", (run_id,)).fetchall()
        out = []
        for pk, ti, reward, messages, state, status, prompt in rows:
            scores = dict(conn.execute("SELECT name, value FROM score WHERE rollout_pk = ?", (pk,)).fetchall())
            errors = [" ".join(map(str, e)) for e in
                      conn.execute("SELECT * FROM rollout_error WHERE rollout_pk = ?", (pk,)).fetchall()]
            calls = conn.execute("SELECT COUNT(*) FROM model_call WHERE rollout_pk = ?", (pk,)).fetchone()[0]
            out.append({"task_index": ti, "reward": reward, "scores": scores, "messages": json.loads(messages),
                        "state": json.loads(state), "status": status, "prompt": json.loads(prompt), "errors": errors, "calls": calls})
        return out
    finally:
        conn.close()


@pytest.mark.parametrize("case", list(PARITY))
def test_scores_equal_verifiers_own(case: str, mock_server: Callable[..., Any], cli: Callable[..., Any],
                                    store_path: Path, legacy_python: Path) -> None:
    name, n, per_task, script = PARITY[case]
    env_file = FIXTURES / name
    ref = verifiers_reference(legacy_python, env_file, mock_server("script", script=script).base_url, n, per_task)
    assert len(ref) == n * per_task

    mock = mock_server("script", script=script)
    r = cli("eval", env_file, "--base-url", mock.base_url, "-m", "mock-model", "-n", n, "-r", per_task, "-c", "1",
            "--json")
    assert r.rc == 0, r.stderr[-3000:]
    out = last_json(r.stdout)
    assert out["rollouts"] == n * per_task and out["env"] == env_file.stem
    mine = stored(store_path, out["run_id"])
    assert [m["task_index"] for m in mine] == [i for i in range(n) for _ in range(per_task)]
    # Paired by task and by conversation: within a task verifiers runs its rollouts concurrently, so which
    # of them got which scripted reply depends on which request arrived first.
    for ours, theirs in _pairs(ref, mine):
        assert ours["status"] == "ok"
        assert ours["reward"] == pytest.approx(theirs["reward"], abs=1e-9), (case, theirs, ours)
        for fn, value in theirs["metrics"].items():
            if fn not in ours["scores"]:  # it raised: a reward error here, 0 in verifiers (and in the total here)
                assert value == 0.0 and any(fn in e for e in ours["errors"]), (case, fn, theirs, ours)
                continue
            assert ours["scores"][fn] == pytest.approx(value, abs=1e-9), (case, fn, theirs, ours)
        # Every model call went through Workbench's interception proxy and is stored with the rollout.
        after_prompt = ours["messages"][len(ours["prompt"]):]
        assert ours["calls"] == sum(1 for m in after_prompt if m["role"] == "assistant") >= 1
    mean = sum(o["reward"] for o in ref) / len(ref)
    assert out["mean_reward"] == pytest.approx(mean, abs=1e-9)


def test_a_judge_rubric_scores_as_verifiers_does(mock_server: Callable[..., Any], cli: Callable[..., Any],
                                                 store_path: Path, legacy_python: Path) -> None:
    """A JudgeRubric calls its judge model through its own client (here a second scripted mock); its verdicts,
    and so the rewards, are the same as under verifiers' own evaluate."""
    env_file = FIXTURES / "vf_judge.py"
    policy, verdicts = ["red", "purple", "blue"], ["yes", "no", "no"]
    judge = mock_server("script", script=verdicts)
    args = json.dumps({"judge_url": judge.base_url})
    ref = verifiers_reference(legacy_python, env_file, mock_server("script", script=policy).base_url, 3, 1, args)

    judge2 = mock_server("script", script=verdicts)
    r = cli("eval", env_file, "-a", json.dumps({"judge_url": judge2.base_url}), "--base-url",
            mock_server("script", script=policy).base_url, "-m", "mock-model", "-n", 3, "-c", "1", "--json")
    assert r.rc == 0, r.stderr[-3000:]
    mine = stored(store_path, last_json(r.stdout)["run_id"])
    assert [o["reward"] for o in ref] == [m["reward"] for m in mine] == [1.0, 0.0, 0.0]
    assert judge2.requests() == 3
    assert all(m["state"]["judge_response"] for m in mine)  # the judge's answers are kept with each rollout


def test_weight_zero_functions_are_metrics(mock_server: Callable[..., Any], cli: Callable[..., Any]) -> None:
    mock = mock_server("script", script=["<answer>1</answer>"])
    r = cli("eval", FIXTURES / "vf_single.py", "--base-url", mock.base_url, "-m", "mock-model", "-n", 2, "--json")
    assert r.rc == 0, r.stderr[-2000:]
    out = last_json(r.stdout)
    assert set(out["rewards"]) == {"correct", "close", "format_reward_func"}
    assert {"length", "num_turns"} <= set(out["metrics"])


def test_a_raising_reward_is_a_reward_error_and_the_run_goes_on(mock_server: Callable[..., Any],
                                                                   cli: Callable[..., Any], store_path: Path) -> None:
    mock = mock_server("script", script=PARITY["raising"][3])
    r = cli("eval", FIXTURES / "vf_raising.py", "--base-url", mock.base_url, "-m", "mock-model", "-n", 4, "-c", "1",
            "--json")
    assert r.rc == 0, r.stderr[-2000:]
    out = last_json(r.stdout)
    assert out["rollouts"] == 4 and out["failed"] == 0 and out["errors"] == 2  # answers 1 and 3 make it raise
    rows = stored(store_path, out["run_id"])
    assert [bool(r["errors"]) for r in rows] == [False, True, False, True]
    assert all("picky" in e and "ValueError" in e for r in rows for e in r["errors"])
    assert [r["reward"] for r in rows] == [pytest.approx(2 * 0.5 + 1.0), 0.0, pytest.approx(1.0), 0.0]


def test_token_exact_traces_and_debug_rescore_validate(mock_server: Callable[..., Any], cli: Callable[..., Any],
                                                       store_path: Path) -> None:
    """A multi-turn verifiers game against a token-returning server: every turn's tokens are recorded and the
    turns line up (no mismatch); debug runs it turn by turn; rescore reproduces the stored scores; validate
    accepts it."""
    env_file = FIXTURES / "vf_game.py"
    mock = mock_server("script", "--tokens", script=PARITY["game"][3])
    r = cli("eval", env_file, "--base-url", mock.base_url, "-m", "mock-model", "-n", 3, "-c", "1", "--json")
    assert r.rc == 0, r.stderr[-2000:]
    out = last_json(r.stdout)
    assert out["metrics"]["token_mismatch"] == 0.0
    run_id = out["run_id"]
    first = stored(store_path, run_id)[0]
    show = cli("show", f"{run_id}.0.0", "--tokens")
    assert show.rc == 0, show.stderr[-2000:]
    assert first["state"]["stop_condition"] == "solved" and first["state"]["guesses"] == [5, 3]

    re = cli("rescore", env_file, "--json")
    assert re.rc == 0, re.stderr[-2000:]
    rs = last_json(re.stdout)
    assert rs["rescored"] == 3 and rs["changed"] == 0 and rs["failed"] == 0

    dbg = cli("debug", env_file, "--task", "1", "--base-url", mock.base_url, "-m", "mock-model", "--json")
    assert dbg.rc == 0, dbg.stderr[-2000:]

    val = cli("validate", env_file, "--json")
    assert val.rc == 0, val.stderr[-2000:]
    assert last_json(val.stdout)["ok"] is True


def test_train_runs_a_verifiers_env(request: pytest.FixtureRequest, cli: Callable[..., Any]) -> None:
    """Two steps of the local async RL loop on the embedded tiny model: its rollouts run the verifiers env
    through the inference server with token ids, and are trained on."""
    pytest.importorskip("torch", reason="training needs the local runtime's torch")
    tiny_dir = request.getfixturevalue("tiny_dir")
    r = cli("train", FIXTURES / "vf_single.py", "-a", '{"n": 40}', "--max-steps", "2", "--trainer.model", tiny_dir,
            "--loop.eval_tasks", "4", "--json", timeout=420)
    assert r.rc == 0, r.stderr[-3000:]
    out = last_json(r.stdout)
    assert out["steps"] == 2 and out["skipped_steps"] == 0
    assert out["reward_first"] is not None and out["eval_first"] is not None


def test_envs_lists_it_as_a_verifiers_env(cli: Callable[..., Any], tmp_path: Path, legacy_version: str) -> None:
    import shutil

    folder = tmp_path / "userenvs"
    folder.mkdir()
    shutil.copy(FIXTURES / "vf_single.py", folder / "vf_single.py")
    r = cli("envs", "--json", env={"WORKBENCH_ENV_PATH": str(folder)})
    assert r.rc == 0, r.stderr[-2000:]
    rows = {row["name"]: row for row in last_json(r.stdout)["envs"]}
    assert rows["vf_single"]["framework"] == legacy_version
    assert "framework" not in rows["arithmetic"]
    table = cli("envs", env={"WORKBENCH_ENV_PATH": str(folder)})
    assert legacy_version in table.stdout


APP_LOAD = """
import signal, sys, threading
from workbench_app.env_state import load_env
from workbench.authoring.discovery import load, resolve

before = signal.getsignal(signal.SIGINT)
env = load(sys.argv[1])  # on the main thread: verifiers' own SIGINT/SIGTERM handlers stay in its worker
assert signal.getsignal(signal.SIGINT) is before, signal.getsignal(signal.SIGINT)
out = {}
t = threading.Thread(target=lambda: out.update(r=load_env(resolve(sys.argv[1]), reload=False)))
t.start(); t.join()
print(env.adapter, out["r"].status, out["r"].framework, out["r"].tasks)
"""


def test_the_app_loads_it_in_a_worker_thread(legacy_version: str, tmp_path: Path) -> None:
    """The Environments screen loads environments in worker threads; verifiers' signal handlers are its
    worker's own, and Workbench's stay in place on the main thread."""
    p = subprocess.run([sys.executable, "-c", APP_LOAD, str(FIXTURES / "vf_game.py")], capture_output=True,
                       text=True, timeout=300, cwd=tmp_path, env={**os.environ, **frameworks_env()})
    assert p.returncode == 0, p.stderr[-3000:]
    v = legacy_version
    assert p.stdout.strip().splitlines()[-1] == f"{v} ok {v} 3"


# -- bad input: one clear line, no traceback -------------------------------------------------------------
#: A legacy environment whose package declares a verifiers without the legacy API (a pyproject beside it).
DECLARES_V04 = '''
import verifiers as vf
from datasets import Dataset

def load_environment():
    return vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": "q", "answer": "a"}]),
                            rubric=vf.Rubric(funcs=[lambda completion: 1.0]))
'''
DECLARES_V04_PYPROJECT = '[project]\nname = "declares-v04"\nversion = "0.1.0"\ndependencies = ["verifiers>=0.4"]\n'

RETURNS_A_NUMBER = '''
import verifiers as vf

def load_environment():
    return 42
'''

OFFLINE_EAGER = '''
import verifiers as vf
from datasets import load_dataset

def load_environment():
    ds = load_dataset("openai/gsm8k", "main", split="test")
    return vf.SingleTurnEnv(dataset=ds, rubric=vf.Rubric(funcs=[lambda completion: 1.0]))
'''

OFFLINE_LAZY = '''
import verifiers as vf
from datasets import load_dataset

def load_environment():
    return vf.SingleTurnEnv(dataset=lambda: load_dataset("openai/gsm8k", "main", split="test"),
                            rubric=vf.Rubric(funcs=[lambda completion: 1.0]))
'''

CUSTOM_ENVIRONMENT = '''
import verifiers as vf
from datasets import Dataset

class Mine(vf.Environment):
    async def rollout(self, input, client, model, sampling_args=None):
        return await self.init_state(input, client, model, sampling_args)

def load_environment():
    return Mine(dataset=Dataset.from_list([{"question": "q", "answer": "a"}]))
'''

ENV_GROUP = '''
import verifiers as vf
from datasets import Dataset

def load_environment():
    ds = Dataset.from_list([{"question": "q", "answer": "a"}])
    a = vf.SingleTurnEnv(dataset=ds, rubric=vf.Rubric(funcs=[lambda completion: 1.0]))
    b = vf.SingleTurnEnv(dataset=ds, rubric=vf.Rubric(funcs=[lambda completion: 0.0]))
    return vf.EnvGroup(envs=[a, b], env_names=["a", "b"])
'''

DECORATED_REWARD = '''
import verifiers as vf
from datasets import Dataset

class Decorated(vf.SingleTurnEnv):
    @vf.reward(weight=1.0)
    async def exact(self, completion, answer) -> float:
        return 1.0

def load_environment():
    return Decorated(dataset=Dataset.from_list([{"question": "q", "answer": "a"}]),
                     rubric=vf.Rubric(funcs=[lambda completion: 1.0]))
'''

BAD = {
    "declares verifiers 0.4": (DECLARES_V04, None, ["declares verifiers>=0.4", "verifiers>=0.3,<0.4"]),
    "returns no verifiers Environment": (RETURNS_A_NUMBER, None, ["returned int, not a verifiers Environment"]),
    "offline dataset, in load_environment": (OFFLINE_EAGER, None, ["'openai/gsm8k'", "a download"]),
    "offline dataset, built lazily": (OFFLINE_LAZY, None, ["'openai/gsm8k'", "a download"]),
    "vf.Environment subclass": (CUSTOM_ENVIRONMENT, None, ["verifiers Mine is not covered"]),
    "EnvGroup": (ENV_GROUP, None, ["verifiers EnvGroup is not covered"]),
    "a decorator the legacy API never runs": (DECORATED_REWARD, None, ["@vf.reward on Decorated.exact is not covered"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_clear_line(case: str, cli: Callable[..., Any],
                                     write_env: Callable[..., Path], mock_server: Callable[..., Any],
                                     tmp_path: Path) -> None:
    source, fixture, expected = BAD[case]
    env_file = FIXTURES / fixture if fixture else write_env(source, f"bad_{abs(hash(case)) % 10_000}.py")
    if case == "declares verifiers 0.4":
        (env_file.parent / "pyproject.toml").write_text(DECLARES_V04_PYPROJECT)
    mock = mock_server("instant")
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    res = cli("eval", str(env_file), "--base-url", mock.base_url, "-m", "mock-model", "-n", "1", env=offline)
    rc, stderr = res.rc, res.stderr
    assert rc != 0
    assert "Traceback" not in stderr, stderr[-3000:]
    last = [line for line in stderr.strip().splitlines() if line.strip()][-1]
    for phrase in expected:
        assert phrase in last, (case, stderr[-2000:])
