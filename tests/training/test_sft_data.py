"""SFT on stored trajectories: ``workbench train ENV --algorithm.name sft --data RUN``. A person's rollout
(``workbench play``: no tokens) is rendered with the trained model's chat template, the loss mask on the
assistant's turns only; the real trainer process trains on it on the CPU; bad input is one clear line."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    CliResult,
    assert_user_error,
    cli_environment,
    last_json,
    run_workbench,
    workbench_argv,
)
from workbench.training import sft_data

pytest.importorskip("torch")
pytest.importorskip("transformers")

CALC = '''
import workbench as wb

def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b

def load_environment():
    rubric = wb.Rubric()
    @rubric.reward
    def correct(completion: str, answer: str) -> float:
        return float(completion.strip() == answer)
    return wb.Environment(name="calc", tasks=wb.TaskSet.from_records([{"prompt": "What is 2+3?", "answer": "5"}]),
                          harness=wb.ToolLoop(tools=[add]), rubric=rubric)
'''


class Played:
    def __init__(self, home: Path) -> None:
        self.home, self.db, self.env_file = home, home / "wb.db", home / "calc.py"
        self.env = cli_environment(home, self.db, WORKBENCH_USER_NAME="alice", HF_HUB_OFFLINE="1")
        self.run_id = ""

    def cli(self, *args: Any, timeout: float = 120.0) -> CliResult:
        return run_workbench(args, self.env, timeout=timeout, cwd=self.home)


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Played:
    """A store holding one ``workbench play`` rollout of a tool env: a tool call, its result, an answer."""
    p = Played(tmp_path_factory.mktemp("sft"))
    p.env_file.write_text(CALC)
    res = subprocess.run([*workbench_argv(), "play", str(p.env_file), "--json"], input='/call add {"a": 2, "b": 3}\n5\n',
                         text=True, capture_output=True, timeout=120, cwd=p.home, env=p.env)
    assert res.returncode == 0, res.stderr
    p.run_id = last_json(res.stdout)["run_id"]
    return p


def _tools() -> list[dict[str, Any]]:
    import workbench as wb

    return wb.ToolLoop(tools=[_add]).schemas


def _add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_a_played_rollout_renders_as_the_templates_tokens_with_the_assistant_turns_masked_in(
        played: Played, tiny_dir: Path) -> None:
    from workbench_local.models.chat_template import normalize_messages
    from workbench_local.training.render import load_tokenizer, render_items

    conn = sqlite3.connect(played.db)
    [item], counts = sft_data.select(conn, [played.run_id], tools_for=lambda env: _tools() if env == "calc" else None)
    assert item.branches is None and item.source == "human" and item.reward == 1.0
    # the tools the player was offered, kept with the rollout, not the ones tools_for gives today (``_add``)
    assert [t["function"]["name"] for t in item.tools or []] == ["add"] and item.tools != _tools()
    assert counts[played.run_id] == {"kind": "play", "rollouts": 1, "errored": 0, "below_min_reward": 0, "rendered": 1}
    assert [m["role"] for m in item.messages or []] == ["user", "assistant", "tool", "assistant"]
    tok = load_tokenizer(str(tiny_dir))
    [rollout] = render_items([item], tok)
    [branch] = rollout.branches
    # The ids are exactly the template's tokens of the whole conversation, tools block included.
    expected = list(tok.apply_chat_template(normalize_messages(item.messages or []), tools=item.tools, tokenize=True))
    assert branch.token_ids == expected and len(branch.mask) == len(expected)
    assert "Tools:" in tok.decode(expected) and '"name": "add"' in tok.decode(expected)
    # The mask covers the assistant's two turns, each to its end token, and nothing else.
    runs: list[tuple[int, list[int]]] = []
    for i, m in zip(branch.token_ids, branch.mask, strict=True):
        if runs and runs[-1][0] == m:
            runs[-1][1].append(i)
        else:
            runs.append((m, [i]))
    masked = [tok.decode(ids) for m, ids in runs if m]
    assert masked == ['<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call><|im_end|>', "5<|im_end|>"]
    unmasked = [tok.decode(ids) for m, ids in runs if not m]
    assert unmasked[0].endswith("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n")
    assert unmasked[1] == "\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n" and unmasked[2] == "\n"
    assert rollout.gold and rollout.ok and rollout.policy_version is None


def test_sft_on_a_played_run_trains_through_the_real_trainer(played: Played, tiny_dir: Path) -> None:
    res = played.cli("train", str(played.env_file), "--algorithm.name", "sft", "--data", played.run_id,
                     "--max-steps", "2", "--trainer.model", str(tiny_dir), "--trainer.lr", "1e-2", "--threads", "1",
                     "--json", timeout=400)
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["steps"] == 2 and out["skipped_steps"] == 0
    conn = sqlite3.connect(played.db)
    kind, status, config = conn.execute("SELECT kind, status, config FROM run WHERE id = ?", (out["run_id"],)).fetchone()
    cfg = json.loads(config)
    assert (kind, status) == ("train", "completed")
    assert cfg["data"]["runs"] == [played.run_id] and cfg["algorithm"]["name"] == "sft" and cfg["loss"]["name"] == "ce"
    steps = [json.loads(m) for (m,) in conn.execute(
        "SELECT metrics FROM train_metric WHERE run_id = ? AND kind = 'step' ORDER BY step", (out["run_id"],))]
    losses = [s["loss"] for s in steps]
    assert len(losses) == 2 and all(abs(v) < 1e6 for v in losses) and losses[1] < losses[0], losses
    assert all(s["samples"] == 1.0 and s["reward_mean"] == 1.0 for s in steps)
    # Nothing was sampled for training: the run's only rollouts are the played ones.
    assert conn.execute("SELECT COUNT(*) FROM rollout WHERE run_id = ?", (out["run_id"],)).fetchone()[0] == 0
    events = [m for (m,) in conn.execute("SELECT message FROM train_metric WHERE run_id = ? AND kind = 'event'",
                                         (out["run_id"],))]
    assert any(e.startswith("SFT data: 1 rollouts of " + played.run_id) for e in events), events
    rdir = played.home / "xdg-data" / "workbench" / "runs" / out["run_id"]
    assert (rdir / "adapters" / "step-2").is_dir() and (rdir / "checkpoint").is_dir()
    assert [i.id for i in sft_data.read(rdir)] == [r for (r,) in conn.execute(
        "SELECT id FROM rollout WHERE run_id = ?", (played.run_id,))]


def _imported_run(db: Path, run_id: str, messages: list[dict[str, Any]], state: dict[str, Any] | None = None) -> str:
    """An imported run of one conversation, with no reward (as ``workbench import`` stores one without)."""
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO run (id, kind, env_name, env_version, env_source, env_args, model, base_url, harness, "
                 "runtime, n_tasks, rollouts_per_task, concurrency, sampling, config, status, error, created_at, "
                 "summary) VALUES (?, 'import', 'imported', '', '', '{}', '', '', '', '', 1, 1, 1, '{}', "
                 "'{}', 'completed', '', ?, '{}')", (run_id, time.time()))
    conn.execute("INSERT INTO rollout (id, run_id, env_name, model, task_id, task_index, sample_index, status, reward, "
                 "prompt_tokens, completion_tokens, cost_usd, duration_s, turns, created_at, prompt, answer, info, "
                 "completion, messages, state, source) VALUES (?, ?, 'imported', '', 't', 0, "
                 "0, 'ok', NULL, 0, 0, 0, 0, 0, ?, '\"hi\"', 'null', '{}', '', ?, ?, 'imported')",
                 (f"{run_id}.0.0", run_id, time.time(), json.dumps(messages), json.dumps(state or {})))
    conn.commit()
    conn.close()
    return run_id


@pytest.mark.parametrize("args, fragments", [
    (("--algorithm.name", "sft", "--data", "no-such-run"), ("no-such-run", "no run")),
    (("--algorithm.name", "grpo", "--data", "{run}"), ("--data", "sft", "not grpo", "--algorithm.name sft")),
    (("--data", "{run}"), ("--data", "sft", "not grpo")),
    (("--algorithm.name", "sft", "--loss.name", "kl", "--data", "{run}"), ("ce loss", "kl")),
    (("--algorithm.name", "sft", "--algorithm.min_reward", "2", "--data", "{run}"),
     ("{run}", "no usable rollouts", "below algorithm.min_reward")),
    (("--algorithm.name", "sft", "--data", "{noassist}"), ("imp-noassist.0.0", "no assistant turn")),
])
def test_bad_sft_data_is_one_clear_line(played: Played, args: tuple[str, ...], fragments: tuple[str, ...]) -> None:
    noassist = _imported_run(played.db, "imp-noassist", [{"role": "user", "content": "hi"}]) \
        if "{noassist}" in args else ""
    fill = {"{run}": played.run_id, "{noassist}": noassist}
    res = played.cli("train", str(played.env_file), *(fill.get(a, a) for a in args), "--max-steps", "1")
    assert_user_error(res, *(fill.get(f, f).replace("{run}", played.run_id) for f in fragments))


def test_batches_cycle_through_the_data_in_epochs() -> None:
    b = sft_data.Batches(3, 2, seed=0)
    seen = [b.next() for _ in range(3)]
    assert all(len(x) == len(set(x)) == 2 for x in seen) and b.position >= 6
    assert sorted(seen[0] + [i for i in range(3) if i not in seen[0]]) == [0, 1, 2]
    assert sft_data.Batches(1, 8, seed=0).next() == [0]  # a batch is at most the whole data set


def test_a_model_runs_rollouts_keep_their_exact_trace_tokens_and_errors_are_left_out(tmp_path: Path) -> None:
    from tests.training.test_training_data import record
    from workbench.store import Store

    store = Store(tmp_path / "wb.db")
    store.create_run("m1", kind="eval", env_name="e")
    w = store.writer()
    w.submit([record("m1", 0, 0, 1.0), record("m1", 0, 1, 0.0), record("m1", 1, 0, None)])
    w.close()
    items, counts = sft_data.select(store.conn, ["m1"])
    assert [i.id for i in items] == ["m1.0.0", "m1.0.1"] and counts["m1"]["errored"] == 1
    assert counts["m1"]["rendered"] == 0 and all(i.messages is None for i in items)
    [b] = items[0].branches or []
    assert b.token_ids == [1, 2, 3, 10, 11] and b.mask == [0, 0, 0, 1, 1] and b.logprobs[-2:] == [-0.5, -0.25]
    assert items[0].rollout().policy_version is None  # stored data is never dropped as stale
    kept, counts = sft_data.select(store.conn, ["m1"], min_reward=0.5)
    assert [i.id for i in kept] == ["m1.0.0"] and counts["m1"]["below_min_reward"] == 1
    # through the data file and the SFT algorithm: advantage 1 on the sampled tokens only
    sft_data.write(tmp_path, items)
    from workbench.training.algorithms import group_rollouts, make_algorithm

    out = make_algorithm("sft").process(group_rollouts(i.rollout() for i in sft_data.read(tmp_path)))
    assert [s.advantages for s in out.samples] == [[0.0, 0.0, 0.0, 1.0, 1.0]] * 2 and out.stats["filtered"] == 0
    store.close()


def test_an_imported_conversation_is_chosen_without_a_reward_with_its_own_tools(tmp_path: Path) -> None:
    from workbench.errors import ConfigError
    from workbench.store import Store

    Store(tmp_path / "wb.db").close()
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    _imported_run(tmp_path / "wb.db", "imp1", msgs, {"import": {"format": "openai-jsonl", "tools": tools}})
    conn = sqlite3.connect(tmp_path / "wb.db")
    [item], _ = sft_data.select(conn, ["imp1"], tools_for=lambda env: None)
    assert item.reward is None and item.source == "imported" and item.messages == msgs and item.tools == tools
    assert item.rollout().ok  # a demonstration needs no reward
    with pytest.raises(ConfigError, match="below algorithm.min_reward"):
        sft_data.select(conn, ["imp1"], min_reward=0.0)  # unscored: it cannot reach a minimum
