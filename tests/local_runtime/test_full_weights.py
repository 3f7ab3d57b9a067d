"""Full fine-tuning reaching the embedded server mid-run: the trainer's whole weights, written by
``Trainer.save_adapter`` (``export.write_weights``) and published with ``POST /update_weights``
(the protocol the Modal gate gives vLLM too), change what the running server answers, and every
answer names the policy version it came from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from workbench.training.algorithms import TrainSample

from .helpers import SERVED, get_json, run_server
from .helpers import post_json as post

PROMPT = "<|im_start|>user\nWhat is 7 + 5?<|im_end|>\n<|im_start|>assistant\n"
N_TOKENS = 4

pytestmark = pytest.mark.slow  # a server subprocess and a few full fine-tuning steps


def greedy(client: Any) -> tuple[list[int], int]:
    r = client.completions.create(model=SERVED, prompt=PROMPT, max_tokens=N_TOKENS, temperature=0.0,
                                  extra_body={"return_token_ids": True, "ignore_eos": True})
    return r.choices[0].model_extra["token_ids"], r.model_extra["policy_version"]


def test_each_published_step_changes_the_servers_completion(tiny_dir: Path, tmp_path: Path) -> None:
    import openai
    from transformers import AutoTokenizer
    from workbench_local.training.trainer import Trainer, TrainerConfig

    prompt = AutoTokenizer.from_pretrained(tiny_dir)(PROMPT)["input_ids"]
    trainer = Trainer(TrainerConfig(model=str(tiny_dir), lora=False, lr=3e-3, micro_batch_tokens=256), loss="ce")
    with run_server(tiny_dir, "--served-model-name", SERVED) as root:
        client = openai.OpenAI(base_url=root + "/v1", api_key="x", max_retries=0, timeout=120)
        before, version = greedy(client)
        assert version == 0
        # A completion the server does not give: the trainer learns it, step after step.
        target = [next(t for t in range(10, 100) if t not in before)] * N_TOKENS
        sample = TrainSample(prompt + target, [0] * len(prompt) + [1] * N_TOKENS, [0.0] * (len(prompt) + N_TOKENS),
                             [0.0] * (len(prompt) + N_TOKENS))
        answers = [before]
        for _ in range(2):  # two published steps of a run; each moves the weights a long way
            for _ in range(10):
                assert not trainer.step([sample]).skipped
            step = trainer.step_count
            path = trainer.save_adapter(tmp_path / "weights" / f"step-{step}")
            assert (path / "model.safetensors").is_file() and (path / "config.json").is_file()
            status, body = post(root + "/update_weights", {"weight_dir": str(path), "policy_version": step})
            assert (status, body["policy_version"]) == (200, step), body
            ids, version = greedy(client)
            assert version == step  # the answer names the weights that produced it
            assert get_json(root + "/v1/models")["data"][0]["policy_version"] == step
            answers.append(ids)
        assert answers[1] != answers[0]  # the first publish changed the server's completion
        assert answers[-1] == target  # and the server now answers what the trainer learned
