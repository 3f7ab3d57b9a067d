"""``workbench export-env ENV --format verifiers``: the package verifiers 0.4 scores as ``workbench eval`` does.

Each bundled environment that translates is exported (a real ``workbench`` subprocess), installed with
``pip install --no-deps --target`` and evaluated by verifiers' own ``vf-eval`` in verifiers' isolated
environment, against the same mock model server ``workbench eval`` then runs against; the per-rollout
rewards agree within 1e-6. The mock answers by a fixed rule of the conversation, so both sides see the
same replies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CliResult, MockServer, last_json

pytestmark = pytest.mark.slow  # each test installs a package and starts vf-eval: tens of seconds

VF_EVAL_TIMEOUT = 300.0
#: vf-eval's own entry point (its console script is not used: the framework environment is built in a
#: temporary folder and renamed, so the scripts' #! lines name a folder that no longer exists).
VF_EVAL = "import sys; from verifiers.v1.cli.eval.main import main; sys.argv[0] = 'vf-eval'; main()"


@pytest.fixture(scope="module")
def verifiers_python() -> Path:
    from workbench.frameworks.venvs import FrameworkEnv

    return FrameworkEnv("verifiers", ("verifiers==0.4.0",)).ensure()


def export(cli: Callable[..., CliResult], env: str, out: Path, *args: str) -> dict[str, Any]:
    res = cli("export-env", env, "--format", "verifiers", "-o", out, *args, "--json")
    assert res.rc == 0, res.stderr
    return last_json(res.stdout)


def pip_install(package_dir: Path, target: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                        "--target", str(target), str(package_dir)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]


def tasks_of(package_dir: Path, module: str) -> list[dict[str, Any]]:
    lines = (package_dir / module / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def vf_eval(python: Path, target: Path, package: str, mock: MockServer, out: Path, n: int, group: int) -> dict:
    """Per task index, the sorted per-rollout rewards verifiers recorded."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PRIME_", "PYTHONPATH"))}
    env.update(PYTHONPATH=str(target), MOCK_KEY="mock", HOME=str(out / "home"), NO_COLOR="1")
    argv = [str(python), "-c", VF_EVAL, package, "-m", "mock-model", "--client.base-url", mock.base_url,
            "--client.api-key-var", "MOCK_KEY", "-n", str(n), "-r", "1", "--env.group-size", str(group),
            "--no-push", "--no-rich", "-o", str(out / "runs")]
    p = subprocess.run(argv, env=env, cwd=out, capture_output=True, text=True, timeout=VF_EVAL_TIMEOUT)
    assert p.returncode == 0, p.stderr[-3000:]
    [traces] = list((out / "runs").glob("*/traces.jsonl"))
    rewards: dict[int, list[float]] = defaultdict(list)
    for line in traces.read_text(encoding="utf-8").splitlines():
        episode = json.loads(line)
        assert not episode["errors"], episode["errors"]
        for trace in episode["traces"]:
            assert trace["ok"], trace["errors"]
            total = sum(r["score"] * r["weight"] for r in trace["rewards"].values() if r is not None)
            assert abs(total - trace["info"]["workbench"]["reward"]) < 1e-9
            rewards[episode["task"]["data"]["idx"]].append(total)
    return {k: sorted(v) for k, v in rewards.items()}


def workbench_eval(cli: Callable[..., CliResult], env: str, mock: MockServer, db: Path, n: int, group: int,
                   *args: str) -> dict:
    """Per task index, the sorted per-rollout rewards ``workbench eval`` stored."""
    res = cli("eval", env, *args, "-n", n, "-r", group, "-m", "mock-model", "--base-url", mock.base_url,
              "--db", db, "--json")
    assert res.rc == 0, res.stderr
    run_id = last_json(res.stdout)["run_id"]
    shown = cli("show", run_id, "--db", db, "--limit", 1000, "--json")
    assert shown.rc == 0, shown.stderr
    rewards: dict[int, list[float]] = defaultdict(list)
    for r in last_json(shown.stdout)["rollouts"]:
        assert r["status"] == "ok", r
        rewards[r["task"]].append(r["reward"])
    return {k: sorted(v) for k, v in rewards.items()}


def assert_same(ours: dict, theirs: dict) -> None:
    assert sorted(ours) == sorted(theirs)
    for task, rewards in ours.items():
        assert len(rewards) == len(theirs[task]), task
        for a, b in zip(rewards, theirs[task], strict=True):
            assert abs(a - b) <= 1e-6, (task, rewards, theirs[task])


def roundtrip(cli: Callable[..., CliResult], tmp_path: Path, python: Path, env: str, mock_for: Callable[..., MockServer],
              n: int, group: int, *args: str) -> tuple[dict, dict, dict[str, Any]]:
    label = Path(env).stem
    pkg = tmp_path / f"{label}-pkg"
    done = export(cli, env, pkg, *args)
    target = tmp_path / f"{label}-site"
    pip_install(pkg, target)
    mock = mock_for(tasks_of(pkg, done["module"]))
    (tmp_path / "vf").mkdir()
    (tmp_path / "vf" / "home").mkdir()
    theirs = vf_eval(python, target, done["package"], mock, tmp_path / "vf", n, group)
    ours = workbench_eval(cli, env, mock, tmp_path / "wb.db", n, group, *args)
    return ours, theirs, done


def test_single_turn_with_a_group_reward_scores_the_same(cli, tmp_path, mock_server, verifiers_python) -> None:
    """arithmetic: single turn, an exact-answer reward and a group reward (the shortest correct answer)."""

    def mock(tasks: list[dict[str, Any]]) -> MockServer:
        rules = []
        for i, t in enumerate(tasks):  # right and short, right and long, wrong: by task
            question = t["prompt"].split("?")[0] + "?"
            reply = [t["answer"], f"The answer is {t['answer']}", "7777"][i % 3]
            rules.append({"contains": question, "reply": reply})
        return mock_server("rules", rules=json.dumps(rules), reply="0")

    ours, theirs, done = roundtrip(cli, tmp_path, verifiers_python, "arithmetic", mock, 6, 2, "-a", '{"n": 6}')
    assert done["harness"] == "SingleTurn" and done["tasks"] == 6
    assert_same(ours, theirs)
    assert {r for rs in theirs.values() for r in rs} == {0.0, 1.2}


def test_tool_loop_scores_the_same(cli, tmp_path, mock_server, verifiers_python) -> None:
    """doc_search: plain Python tools run in the exported harness, a tool error goes back to the model."""

    def mock(tasks: list[dict[str, Any]]) -> MockServer:
        def call(name: str, args: dict[str, Any], cid: str) -> dict[str, Any]:
            return {"tool_calls": [{"id": cid, "type": "function",
                                    "function": {"name": name, "arguments": json.dumps(args)}}]}

        script = [call("search", {"query": "Acme founded year"}, "c1"), call("read", {"doc_id": "no-such-doc"}, "c2"),
                  call("read", {"doc_id": tasks[0]["info"]["source"]}, "c3"), f"ANSWER: {tasks[0]['answer']}"]
        return mock_server("script", "--by-turn", script=script)

    ours, theirs, done = roundtrip(cli, tmp_path, verifiers_python, "doc_search", mock, 4, 1)
    assert done["harness"] == "ToolLoop"
    assert_same(ours, theirs)
    assert theirs[0] == [1.0] and theirs[3] == [0.0]


def test_multi_turn_game_scores_the_same(cli, tmp_path, mock_server, verifiers_python) -> None:
    """wordle: the environment's own MultiTurn harness answers each guess; state feeds the rewards."""

    def mock(tasks: list[dict[str, Any]]) -> MockServer:
        script = ["<guess>crane</guess>", f"<guess>{tasks[0]['answer']}</guess>", "no guess here",
                  f"<guess>{tasks[2]['answer']}</guess>", "<guess>zzzzz</guess>"]
        return mock_server("script", "--by-turn", script=script)

    ours, theirs, done = roundtrip(cli, tmp_path, verifiers_python, "wordle", mock, 3, 2,
                                   "-a", '{"n": 3, "max_turns": 4}')
    assert done["harness"] == "WordleHarness"
    assert_same(ours, theirs)
    assert theirs[0] == pytest.approx([1.0 + 0.2 * 0.75] * 2) and theirs[1] == [0.0, 0.0]


SPELL_ENV = '''
import workbench as wb


def count(word: str, state) -> dict:
    """Count a word's letters.

    Args:
        word: The word.
    """
    state["calls"] = state.get("calls", 0) + 1
    return {"word": word, "letters": len(word)}


def load_environment():
    rows = [{"prompt": f"Spell {w}", "answer": w, "info": {"n": len(w)}} for w in ["apple", "kiwi", "banana"]]
    rubric = wb.Rubric()

    @rubric.reward(weight=0.5)
    def parts(completion, answer, info):
        return {"has": float(answer in completion), "len": info["n"] / 10}

    @rubric.reward(weight=2.0)
    async def used_tool(state):
        return float(state.get("calls", 0) > 0)

    @rubric.reward
    def broken(answer):
        if answer == "kiwi":
            raise ValueError("no kiwis")
        return 1.0

    @rubric.metric
    def n_messages(messages):
        return float(len(messages))

    @rubric.group_reward(weight=0.1)
    def rank(rewards):
        return [float(r == max(rewards)) for r in rewards]

    return wb.Environment(name="spell", tasks=wb.TaskSet.from_records(rows),
                          harness=wb.ToolLoop(tools=[count], max_turns=3, system_prompt="Use the tool."),
                          rubric=rubric, sampling=wb.Sampling(max_tokens=32))
'''


def test_a_single_file_environment_with_keyed_async_and_failing_rewards_scores_the_same(
        cli, tmp_path, mock_server, verifiers_python, write_env) -> None:
    """Keyed scores, an async reward over the tool's state, a reward that raises on one task (left out of
    the total, as Workbench does), a tool returning JSON, a group reward over the totals."""
    env = str(write_env(SPELL_ENV, "spell.py"))

    def mock(tasks: list[dict[str, Any]]) -> MockServer:
        call = {"tool_calls": [{"id": "c1", "type": "function",
                                "function": {"name": "count", "arguments": json.dumps({"word": "apple"})}}]}
        return mock_server("script", "--by-turn", script=[call, "apple banana"])

    ours, theirs, done = roundtrip(cli, tmp_path, verifiers_python, env, mock, 3, 2)
    assert done["harness"] == "ToolLoop" and (tmp_path / "spell-pkg" / "spell" / "_env" / "source.py").is_file()
    assert_same(ours, theirs)
    assert theirs[1] == pytest.approx([0.5 * 0.4 + 2.0 + 0.1] * 2)  # kiwi: not in the reply, broken left out


def test_the_package_runs_back_in_workbench_as_a_verifiers_environment(cli, tmp_path, mock_server) -> None:
    """An exported package is itself a verifiers v1 environment: ``workbench eval`` of its folder (verifiers'
    machinery in its own environment) scores each rollout as ``workbench eval`` of the original does."""
    pkg = tmp_path / "pkg"
    done = export(cli, "arithmetic", pkg, "-a", '{"n": 4}')
    rules = [{"contains": t["prompt"], "reply": [t["answer"], "no idea"][i % 2]}
             for i, t in enumerate(tasks_of(pkg, done["module"]))]
    mock = mock_server("rules", rules=json.dumps(rules), reply="0")
    ours = workbench_eval(cli, "arithmetic", mock, tmp_path / "a.db", 4, 1, "-a", '{"n": 4}')
    back = workbench_eval(cli, str(pkg / done["module"]), mock, tmp_path / "b.db", 4, 1)
    assert_same(ours, back)
    assert ours == {0: [1.2], 1: [0.0], 2: [1.2], 3: [0.0]}
