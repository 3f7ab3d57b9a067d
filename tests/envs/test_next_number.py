"""The bundled next_number environment: its tasks, its reward, its bad input, and its contract with the
embedded model's corpus (the same prompt, every number of the env taught, declines as the corpus says)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import workbench_envs.next_number as nn
from workbench_local.models import tiny_corpus

from tests.envs.test_bundled_envs import score
from tests.helpers import CliResult, assert_user_error
from workbench.authoring.discovery import load


def test_tasks_are_every_number_once_with_its_successor() -> None:
    env = load("next_number")
    numbers = [t.info["n"] for t in env.tasks]
    assert sorted(numbers) == list(range(60)) and numbers != list(range(60))  # shuffled, each once
    assert all(t.answer == str(t.info["n"] + 1) and t.prompt == f"What number comes next?\n{t.info['n']}"
               for t in env.tasks)
    assert [t.info["n"] for t in load("next_number", {"n": 10, "start": 100}).tasks] != numbers[:10]
    assert env.sampling.temperature == 0.7 and env.harness.describe()


CASES = [  # (completion, reward, declined, off_by) for the task "37"
    ("38", 1.0, 0.0, 0.0),
    (" 38.\n", 1.0, 0.0, 0.0),
    ("It is 38", 1.0, 0.0, 0.0),
    ("37", 0.0, 0.0, -1.0),
    ("39", 0.0, 0.0, 1.0),
    ("I am not sure.", 0.0, 1.0, 0.0),
    ("", 0.0, 1.0, 0.0),
    ("36 37 38 39 40", 0.0, 0.0, 2.0),  # a list of candidates is not an answer
    ("37 or maybe 38", 0.0, 0.0, 0.0),
]


@pytest.mark.parametrize(("completion", "reward", "declined", "off_by"), CASES)
async def test_reward_and_metrics(completion: str, reward: float, declined: float, off_by: float) -> None:
    env = load("next_number")
    task = next(t for t in env.tasks if t.info["n"] == 37)
    s = await score(env, task, completion)
    assert (s.rewards["next_one"], s.metrics["declined"], s.metrics["off_by"]) == (reward, declined, off_by)


@pytest.mark.parametrize(("args", "fragment"), [
    ('{"n": 0}', "n must be a positive integer"),
    ('{"n": "ten"}', "n must be a positive integer"),
    ('{"start": 1.5}', "start must be an integer"),
    ('{"rounds": 0}', "rounds must be a positive integer"),
])
def test_bad_arguments_end_in_one_line(cli: Callable[..., CliResult], args: str, fragment: str) -> None:
    assert_user_error(cli("eval", "next_number", "-a", args, "--base-url", "http://127.0.0.1:9/v1", "-m", "m"),
                      fragment)


async def test_count_on_scores_the_fraction_of_rounds_right() -> None:
    env = load("next_number", {"rounds": 3})
    task = next(t for t in env.tasks if t.info["n"] == 37)
    harness = env.harness
    assert isinstance(harness, nn.CountOn) and harness.describe() == "CountOn(rounds=3)"
    state: dict = {}
    await harness.setup(task, state)
    msgs = [{"role": "user", "content": task.prompt}, {"role": "assistant", "content": "38"}]
    assert await harness.respond(msgs, state) == [{"role": "user", "content": "What number comes next?\n38"}]
    msgs += [{"role": "assistant", "content": "I am not sure."}]
    assert await harness.respond(msgs, state) == [{"role": "user", "content": "What number comes next?\n39"}]
    msgs += [{"role": "assistant", "content": "40"}]
    assert await harness.respond(msgs, state) is None and state["right"] == [True, False, True]
    s = await score(env, task, "40", messages=msgs, state=state)
    assert s.rewards["next_one"] == pytest.approx(2 / 3)


def test_the_corpus_teaches_the_env_prompt_for_every_number() -> None:
    examples = tiny_corpus.next_examples(random.Random(0), 4000)
    prompts = {t.prompt for t in load("next_number").tasks}
    assert {e.messages[-1]["content"] for e in examples} == prompts
    assert all(e.messages[0]["content"] == nn.SYSTEM_PROMPT for e in examples)
    answered = [e for e in examples if e.reply["content"] != tiny_corpus.NEXT_DECLINE]
    assert abs(len(answered) / len(examples) - tiny_corpus.NEXT_P_CORRECT) < 0.03
    assert all(e.reply["content"] == str(int(e.messages[-1]["content"].split("\n")[-1]) + 1) for e in answered)
