"""Advantage math of the algorithms on hand-made groups, and on a real run's (no torch)."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import CliResult, MockServer, last_json
from workbench.errors import ConfigError
from workbench.records.trace import Trace
from workbench.training.algorithms import (
    Branch,
    TrainRollout,
    group_rollouts,
    make_algorithm,
    parse_prompt_logprobs,
    teacher_request,
)
from workbench.training.data import load_rollouts


def rollout(i: int, reward: float | None, group: str = "run:0", status: str = "ok", n_prompt: int = 2,
            n_completion: int = 3, version: int | None = None, gold: bool = False) -> TrainRollout:
    ids = list(range(10 * i, 10 * i + n_prompt + n_completion))
    mask = [0] * n_prompt + [1] * n_completion
    lps = [0.0] * n_prompt + [-1.0] * n_completion
    return TrainRollout(f"r{i}", group, reward, [Branch(ids, lps, mask, version)], status, gold)


def advantages_of(out, rollout_id: str) -> list[float]:
    return next(s.advantages for s in out.samples if s.rollout_id == rollout_id)


def test_grpo_known_advantages() -> None:
    group = [rollout(i, r) for i, r in enumerate([0.0, 1.0, 2.0, 3.0])]
    out = make_algorithm("grpo").process([group])
    std = math.sqrt(1.25)  # population std of 0, 1, 2, 3
    for i, r in enumerate([0.0, 1.0, 2.0, 3.0]):
        adv = advantages_of(out, f"r{i}")
        assert adv[:2] == [0.0, 0.0]  # prompt tokens carry no advantage
        assert adv[2:] == pytest.approx([(r - 1.5) / (std + 1e-6)] * 3)
    assert out.stats["zero_variance_groups"] == 0
    assert out.stats["reward_mean"] == pytest.approx(1.5)
    assert out.stats["advantage_mean"] == pytest.approx(0.0, abs=1e-9)


def test_dr_grpo_does_not_scale_by_std() -> None:
    out = make_algorithm("grpo", scale_by_std=False).process([[rollout(i, r) for i, r in enumerate([0, 1, 2, 3])]])
    assert [advantages_of(out, f"r{i}")[-1] for i in range(4)] == pytest.approx([-1.5, -0.5, 0.5, 1.5])


def test_zero_variance_groups_give_zero_and_are_counted() -> None:
    flat = [rollout(i, 1.0, "run:0") for i in range(3)]
    single = [rollout(9, 0.7, "run:1")]
    live = [rollout(5, 0.0, "run:2"), rollout(6, 1.0, "run:2")]
    out = make_algorithm("grpo").process([flat, single, live])
    assert out.stats["zero_variance_groups"] == 2
    assert all(a == 0.0 for s in out.samples if s.group_id in ("run:0", "run:1") for a in s.advantages)
    assert len(out.samples) == 6
    skipped = make_algorithm("grpo", skip_zero_variance=True).process([flat, single, live])
    assert [s.rollout_id for s in skipped.samples] == ["r5", "r6"]
    assert skipped.stats["zero_variance_groups"] == 2 and skipped.stats["filtered"] == 4


def test_rloo_leave_one_out_baseline() -> None:
    out = make_algorithm("rloo").process([[rollout(i, r) for i, r in enumerate([0.0, 1.0, 2.0, 3.0])]])
    # r_i - mean of the other three
    assert [advantages_of(out, f"r{i}")[-1] for i in range(4)] == pytest.approx([-2.0, -2 / 3, 2 / 3, 2.0])
    flat = make_algorithm("rloo").process([[rollout(0, 0.5), rollout(1, 0.5)]])
    assert flat.stats["zero_variance_groups"] == 1 and all(a == 0.0 for a in flat.samples[0].advantages)


def test_errors_and_tokenless_rollouts_are_left_out_and_counted() -> None:
    group = [rollout(0, 1.0), rollout(1, 0.0), rollout(2, None, status="error"), rollout(3, 1.0, status="error"),
             TrainRollout("r4", "run:0", 1.0, [])]
    out = make_algorithm("grpo", scale_by_std=False).process([group])
    assert out.stats["skipped_errors"] == 2 and out.stats["skipped_no_tokens"] == 1
    assert sorted(s.rollout_id for s in out.samples) == ["r0", "r1"]
    assert advantages_of(out, "r0")[-1] == pytest.approx(0.5)  # baseline over the two good rollouts only


def test_group_rewards_flow_into_advantages(mock_server: Callable[..., MockServer], cli: Callable[..., CliResult],
                                            write_env: Callable[..., Path], store_path: Path) -> None:
    """A real run of a rubric with a group reward (the shortest correct answer of the group earns a bonus),
    read back from the store as training input: the bonus is in the rewards, so in the advantages; were it
    ignored, the two correct answers would tie."""
    env = write_env('''
        import workbench as wb
        def load_environment():
            rubric = wb.Rubric()
            @rubric.reward
            def correct(completion: str, answer: str) -> float:
                return float(answer in completion)
            @rubric.group_reward(weight=0.5)
            def shortest_correct(completions: list, answers: list) -> list:
                right = [len(c) for c, a in zip(completions, answers) if a in c]
                return [float(a in c and len(c) == min(right)) for c, a in zip(completions, answers)]
            return wb.Environment(name="grouped", tasks=wb.TaskSet.from_records([{"prompt": "2 + 2?", "answer": "4"}]),
                                  harness=wb.SingleTurn(), rubric=rubric)
        ''')
    mock = mock_server("script", "--tokens", script=["The answer is 4", "4", "5"])
    res = cli("eval", env, "--base-url", mock.base_url, "-m", "mock-model", "-r", "3", "-c", "1", "--json")
    assert res.rc == 0, res.stderr
    run_id = last_json(res.stdout)["run_id"]
    db = sqlite3.connect(store_path)
    completion = dict(db.execute("SELECT id, completion FROM rollout WHERE run_id = ?", (run_id,)).fetchall())
    rollouts, _ = load_rollouts(db, run_id)
    [group] = group_rollouts(rollouts)
    reward = {completion[r.id]: r.reward for r in group}
    assert reward == {"The answer is 4": 1.0, "4": 1.5, "5": 0.0}, reward  # correct + 0.5 x the group bonus
    out = make_algorithm("grpo", scale_by_std=False).process([group])
    mean = 2.5 / 3
    for r in group:
        assert advantages_of(out, r.id) == pytest.approx([0.0] * r.branches[0].mask.count(0) + [reward[completion[r.id]] - mean]
                                                         * r.branches[0].mask.count(1)), completion[r.id]


def test_sft_threshold_and_gold() -> None:
    group = [rollout(0, 1.0), rollout(1, 0.4), rollout(2, 0.5), rollout(3, 0.0, gold=True)]
    out = make_algorithm("sft", min_reward=0.5).process([group])
    assert sorted(s.rollout_id for s in out.samples) == ["r0", "r2", "r3"]
    assert out.stats["filtered"] == 1
    assert all(a == (1.0 if m else 0.0) for s in out.samples for a, m in zip(s.advantages, s.loss_mask, strict=True))
    gold = make_algorithm("sft", gold_only=True).process([group])
    assert [s.rollout_id for s in gold.samples] == ["r3"]
    assert make_algorithm("sft").default_loss == "ce" and make_algorithm("grpo").default_loss == "pg"


def test_distillation_advantage_is_teacher_minus_student() -> None:
    r = rollout(0, 0.0)
    r.branches[0].logprobs = [0.0, 0.0, -1.0, -2.0, -0.5]
    r.branches[0].teacher_logprobs = [-9.0, -3.0, -0.5, -2.5, -0.5]
    out = make_algorithm("distill").process([[r]])
    assert out.samples[0].advantages == pytest.approx([0.0, 0.0, 0.5, -0.5, 0.0])
    clipped = make_algorithm("distill", coef=2.0, clip=0.6).process([[r]])
    assert clipped.samples[0].advantages == pytest.approx([0.0, 0.0, 0.6, -0.6, 0.0])
    r.branches[0].teacher_logprobs = None
    with pytest.raises(ValueError, match="teacher logprob"):
        make_algorithm("distill").process([[r]])


def test_teacher_request_and_vllm_prompt_logprobs() -> None:
    body = teacher_request([5, 7, 9], "teacher")
    assert body["prompt"] == [5, 7, 9] and body["prompt_logprobs"] == 1 and body["model"] == "teacher"
    # vLLM: one entry per prompt token, null first; keys are token ids as strings; top-k may add others
    response = {"choices": [{"text": "x", "prompt_logprobs": [
        None,
        {"7": {"logprob": -1.25, "rank": 2, "decoded_token": "b"}, "8": {"logprob": -0.5, "rank": 1}},
        {"9": {"logprob": -0.125, "rank": 1, "decoded_token": "c"}},
    ]}]}
    assert parse_prompt_logprobs(response, [5, 7, 9]) == [0.0, -1.25, -0.125]
    with pytest.raises(ValueError, match="no prompt_logprobs"):
        parse_prompt_logprobs({"choices": [{"text": "x"}]}, [5, 7, 9])
    with pytest.raises(ValueError, match="lack token"):
        parse_prompt_logprobs(response, [5, 7, 4])


def test_from_trace_one_sample_per_branch_with_oldest_version() -> None:
    t = Trace()
    sys_user = [{"role": "user", "content": "hi"}]
    a1 = {"role": "assistant", "content": "a"}
    t.record(sys_user, a1, prompt_ids=[1, 2, 3], completion_ids=[4, 5], completion_logprobs=[-0.1, -0.2],
             policy_version=3)
    follow = [*sys_user, a1, {"role": "user", "content": "more"}]
    t.record(follow, {"role": "assistant", "content": "b"}, prompt_ids=[1, 2, 3, 4, 5, 6], completion_ids=[7],
             completion_logprobs=[-0.3], policy_version=4)
    # a re-tokenized prompt that does not extend the path starts a second branch
    t.record(follow, {"role": "assistant", "content": "c"}, prompt_ids=[1, 2, 9, 9], completion_ids=[8],
             completion_logprobs=[-0.4], policy_version=5)
    packed = Trace.unpack(*t.pack())
    rollouts = [TrainRollout.from_trace("r0", "run:0", 1.0, packed), TrainRollout.from_trace("r1", "run:0", 0.0, t)]
    out = make_algorithm("grpo", scale_by_std=False).process(group_rollouts(rollouts))
    mine = [s for s in out.samples if s.rollout_id == "r0"]
    assert len(mine) == 2
    first = next(s for s in mine if s.token_ids[:3] == [1, 2, 3])
    assert first.token_ids == [1, 2, 3, 4, 5, 6, 7]
    assert first.loss_mask == [0, 0, 0, 1, 1, 0, 1]
    assert first.inference_logprobs == pytest.approx([0, 0, 0, -0.1, -0.2, 0, -0.3])
    assert first.advantages == [0, 0, 0, 0.5, 0.5, 0, 0.5]
    assert first.policy_version == 3
    second = next(s for s in mine if s is not first)
    assert second.token_ids == [1, 2, 9, 9, 8] and second.policy_version == 5


def test_config_typos_name_the_nearest_valid_choice() -> None:
    with pytest.raises(ConfigError, match="did you mean 'grpo'"):
        make_algorithm("gpro")
    with pytest.raises(ConfigError, match="did you mean 'scale_by_std'"):
        make_algorithm("grpo", scale_std=False)
    with pytest.raises(ConfigError, match="true or false"):
        make_algorithm("grpo", scale_by_std="no")
    assert make_algorithm("GRPO", eps=1).eps == 1.0
