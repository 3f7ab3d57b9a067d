"""LoRA adapters loaded and unloaded at runtime with vLLM's endpoints, selected by ``model=``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import SERVED, get_json, run_server
from .helpers import post_json as post

PROMPT = "<|im_start|>user\nTell me a joke.<|im_end|>\n<|im_start|>assistant\n"


def make_adapter(tiny_dir: Path, out: Path, seed: int, rank: int = 8) -> Path:
    """A random, non-zero LoRA adapter on the tiny model (B is not zero-initialised)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    cfg = LoraConfig(r=rank, lora_alpha=32, init_lora_weights=False,
                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    get_peft_model(model, cfg).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def adapters(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return make_adapter(tiny_dir, root / "a", 1), make_adapter(tiny_dir, root / "b", 2)


@pytest.fixture(scope="module")
def lora_server(tiny_dir: Path, adapters: tuple[Path, Path]) -> Iterator[str]:
    with run_server(tiny_dir, "--served-model-name", SERVED, "--adapter", f"boot={adapters[1]}") as root:
        yield root


def sample(client: Any, model: str) -> tuple[list[int], list[float], str]:
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=10, seed=7, temperature=1.0, logprobs=0,
                                  extra_body={"return_token_ids": True})
    c = r.choices[0]
    return c.model_extra["token_ids"], c.logprobs.token_logprobs, r.model_extra["policy_version"]


def test_load_select_unload(lora_server: str, adapters: tuple[Path, Path]) -> None:
    import openai

    client = openai.OpenAI(base_url=lora_server + "/v1", api_key="x", max_retries=0)
    assert {m.id for m in client.models.list().data} == {SERVED, "boot"}  # --adapter at startup
    base_ids, base_lps, base_version = sample(client, SERVED)
    assert base_version == 0

    status, body = post(lora_server + "/v1/load_lora_adapter", {"lora_name": "policy", "lora_path": str(adapters[0])})
    assert status == 200, body
    assert body["policy_version"] == 2
    models = {m["id"]: m for m in get_json(lora_server + "/v1/models")["data"]}
    assert models["policy"]["parent"] == SERVED

    ids, lps, version = sample(client, "policy")
    assert version == 2
    assert lps[0] != pytest.approx(base_lps[0], abs=1e-4) or ids != base_ids  # different weights, same seed
    assert (ids, lps) != (base_ids, base_lps)

    # reloading under the same name replaces the weights and bumps the version
    status, body = post(lora_server + "/v1/load_lora_adapter", {"lora_name": "policy", "lora_path": str(adapters[1])})
    assert status == 200 and body["policy_version"] == 3
    # a trainer can name the version itself (the step that produced the weights)
    status, body = post(lora_server + "/v1/load_lora_adapter",
                        {"lora_name": "policy", "lora_path": str(adapters[0]), "policy_version": 17})
    assert status == 200 and body["policy_version"] == 17
    assert sample(client, "policy")[2] == 17

    status, body = post(lora_server + "/v1/unload_lora_adapter", {"lora_name": "policy"})
    assert status == 200, body
    with pytest.raises(openai.NotFoundError):
        sample(client, "policy")
    status, body = post(lora_server + "/v1/unload_lora_adapter", {"lora_name": "boot"})
    assert status == 200
    assert [m.id for m in client.models.list().data] == [SERVED]

    again_ids, again_lps, _ = sample(client, SERVED)  # the base weights are untouched
    assert again_ids == base_ids
    assert again_lps == pytest.approx(base_lps, abs=1e-5)


def test_an_adapter_of_the_same_shape_refills_an_unloaded_ones_slot(tiny_dir: Path, tmp_path: Path,
                                                                     adapters: tuple[Path, Path]) -> None:
    """What a training run does every step (load step N, unload an old one): the new weights are
    copied into the old adapter's LoRA layers, and sample exactly as when loaded into new ones."""
    import openai

    c, d = make_adapter(tiny_dir, tmp_path / "c", 3), make_adapter(tiny_dir, tmp_path / "d", 4, rank=4)
    with run_server(tiny_dir, "--served-model-name", SERVED) as root:
        client = openai.OpenAI(base_url=root + "/v1", api_key="x", max_retries=0)

        def load(name: str, path: Path) -> None:
            status, body = post(root + "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
            assert status == 200, body

        load("fresh-c", c)
        ref_c = sample(client, "fresh-c")[:2]
        load("step-1", adapters[0])
        ref_a = sample(client, "step-1")[:2]
        assert post(root + "/v1/unload_lora_adapter", {"lora_name": "step-1"})[0] == 200
        load("step-2", c)  # into step-1's layers
        assert get_json(root + "/health")["adapter_slots"] == 2
        assert sample(client, "step-2")[:2] == ref_c != ref_a
        assert sample(client, "fresh-c")[:2] == ref_c
        assert post(root + "/v1/unload_lora_adapter", {"lora_name": "fresh-c"})[0] == 200
        load("rank-4", d)  # another shape: layers of its own
        assert get_json(root + "/health")["adapter_slots"] == 3
        load("step-3", adapters[0])  # back into the free slot
        assert get_json(root + "/health")["adapter_slots"] == 3
        assert sample(client, "step-3")[:2] == ref_a


def test_adapter_errors(lora_server: str, tmp_path: Path) -> None:
    status, body = post(lora_server + "/v1/unload_lora_adapter", {"lora_name": "never-loaded"})
    assert status == 404 and "never-loaded" in body["error"]["message"]
    status, body = post(lora_server + "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": str(tmp_path / "nope")})
    assert status == 400 and "adapter_config.json" in body["error"]["message"]
    status, body = post(lora_server + "/v1/load_lora_adapter", {"lora_name": "x"})
    assert status == 400 and "lora_path" in body["error"]["message"]
    status, body = post(lora_server + "/v1/load_lora_adapter", {"lora_name": SERVED, "lora_path": str(tmp_path)})
    assert status == 400


def make_full_weights(tiny_dir: Path, out: Path, seed: int) -> Path:
    """The tiny model with every weight perturbed, saved as a full-fine-tuning step would save it."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(out, safe_serialization=True)
    return out


def test_update_weights_replaces_the_base_model_in_place(tiny_dir: Path, tmp_path: Path,
                                                         adapters: tuple[Path, Path]) -> None:
    """Full fine-tuning's publish: /update_weights swaps the served weights and the version; bad
    weights are refused with the reason and the served weights stay as they were."""
    import openai
    import torch
    from safetensors.torch import save_file

    new = make_full_weights(tiny_dir, tmp_path / "step-3", seed=3)
    with run_server(tiny_dir, "--served-model-name", SERVED) as root:
        client = openai.OpenAI(base_url=root + "/v1", api_key="x", max_retries=0)
        base_ids, base_lps, version = sample(client, SERVED)
        assert version == 0

        status, body = post(root + "/update_weights", {"weight_dir": str(new), "policy_version": 3})
        assert (status, body["policy_version"]) == (200, 3), body
        ids, lps, version = sample(client, SERVED)
        assert version == 3 and get_json(root + "/health")["policy_version"] == 3
        assert (ids, lps) != (base_ids, base_lps)  # the same seed on other weights

        (tmp_path / "empty").mkdir()
        wrong = tmp_path / "wrong"
        wrong.mkdir()
        save_file({"model.norm.weight": torch.ones(7)}, str(wrong / "model.safetensors"))
        alien = tmp_path / "alien"
        alien.mkdir()
        save_file({"not.a.tensor.of.this.model": torch.ones(2)}, str(alien / "model.safetensors"))
        for body, code, text in [({"weight_dir": str(tmp_path / "empty")}, 400, "no weights"),
                                 ({"weight_dir": str(wrong)}, 400, "has shape (7,)"),
                                 ({"weight_dir": str(alien)}, 400, "unknown tensor"),
                                 ({"weight_dir": str(new), "policy_version": "4"}, 400, "must be an integer"),
                                 ({}, 400, "weight_dir")]:
            status, answer = post(root + "/update_weights", body)
            assert status == code and text in json.dumps(answer), answer
        assert sample(client, SERVED) == (ids, lps, 3)  # nothing half-loaded

        # With an adapter loaded the base weights cannot change under it.
        assert post(root + "/v1/load_lora_adapter", {"lora_name": "a", "lora_path": str(adapters[0])})[0] == 200
        status, answer = post(root + "/update_weights", {"weight_dir": str(new)})
        assert status == 409 and "unload them" in json.dumps(answer)
