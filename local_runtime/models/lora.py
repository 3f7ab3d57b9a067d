"""Building the model the trainer trains: the base model through ``from_pretrained`` (a local
directory, ``tiny``, or a Hugging Face id in the local cache — resolved as the embedded server
resolves them), then LoRA adapters from peft, or every parameter for full fine-tuning."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

from workbench.errors import ConfigError, nearest


def resolve_dtype(dtype: str, device: str) -> Any:
    import torch

    table = {"auto": torch.float32 if device == "cpu" else torch.bfloat16, "float32": torch.float32,
             "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise ConfigError(f"trainer dtype {dtype!r}: use auto, float32, bfloat16 or float16")
    return table[dtype]


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def load_base_model(spec: str, *, dtype: Any, device: str, allow_download: bool = False,
                    trust_remote_code: bool = False) -> Any:
    """``AutoModelForCausalLM.from_pretrained`` on what ``spec`` names, in ``dtype`` on ``device``."""
    from workbench_local.models.loading import ModelLoadError, resolve

    if not allow_download:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    source, _name = resolve(spec, allow_download=allow_download)
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no stray tqdm lines under the CLI's own progress display
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, trust_remote_code=trust_remote_code)
    except Exception as e:
        first = str(e).splitlines()[0][:200] if str(e) else ""
        raise ModelLoadError(f"cannot load model {spec} for training ({type(e).__name__}: {first})") from None
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return model.to(device)  # type: ignore[arg-type]  # transformers' stubs wrap .to so that mypy takes device for self


def linear_module_names(model: Any) -> list[str]:
    """The distinct leaf names of the model's linear layers (what LoRA ``target_modules`` name)."""
    import torch

    kinds: tuple[type, ...] = (torch.nn.Linear,)
    try:
        from transformers.pytorch_utils import Conv1D

        kinds = (*kinds, Conv1D)
    except ImportError:
        pass
    return sorted({name.rsplit(".", 1)[-1] for name, mod in model.named_modules() if name and isinstance(mod, kinds)})


def check_targets(model: Any, targets: str | Sequence[str]) -> list[str] | str:
    """``targets`` if every named module exists in ``model`` (``"all-linear"`` always does), else a
    ConfigError listing the model's linear modules."""
    if isinstance(targets, str):
        if targets == "all-linear":
            return targets
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    targets = list(targets)
    if not targets:
        raise ConfigError("LoRA target_modules is empty; name some linear modules or use 'all-linear'")
    names = [n for n, _ in model.named_modules() if n]
    linear = linear_module_names(model)
    missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
    if missing:
        hint = nearest(missing[0], linear)
        arch = type(model).__name__
        raise ConfigError(f"LoRA target module{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} "
                          f"not in the model ({arch}){hint}; its linear modules are: {', '.join(linear)} "
                          "(or use 'all-linear')")
    return targets


def apply_lora(model: Any, *, rank: int, alpha: float, dropout: float, targets: str | Sequence[str]) -> Any:
    """Wrap ``model`` with fresh LoRA adapters (only they are trainable)."""
    from peft import LoraConfig, get_peft_model

    if rank < 1:
        raise ConfigError(f"LoRA rank must be at least 1, not {rank}")
    tm = check_targets(model, targets)
    # peft declares lora_alpha an int; any number scales the same
    cfg = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=tm, bias="none",  # type: ignore[arg-type]
                     task_type="CAUSAL_LM")
    with warnings.catch_warnings():  # peft calls a transformers method deprecated in 5.x
        warnings.simplefilter("ignore", FutureWarning)
        return get_peft_model(model, cfg)


def adapter_state(model: Any) -> dict[str, Any]:
    """The trainable LoRA weights, as peft saves them."""
    from peft import get_peft_model_state_dict

    return get_peft_model_state_dict(model)


def load_adapter_weights(model: Any, adapter_dir: Any) -> None:
    """Load ``adapter_model.safetensors`` from ``adapter_dir`` into the (already wrapped) model."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    sd = load_file(str(adapter_dir / "adapter_model.safetensors"))
    result = set_peft_model_state_dict(model, sd)
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise ConfigError(f"the checkpoint's adapter does not fit this model (unexpected weights such as "
                          f"{unexpected[0]}); resume with the same model and LoRA settings")


def load_full_weights(model: Any, model_dir: Any) -> None:
    from safetensors.torch import load_file

    sd: dict[str, Any] = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        sd.update(load_file(str(f)))
    _missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected:
        raise ConfigError(f"the checkpoint's weights do not fit this model (unexpected {unexpected[0]}); resume "
                          "with the same model")


def save_adapter(model: Any, path: Any) -> None:
    """The LoRA adapter's files as peft's ``save_pretrained`` writes them (``adapter_config.json``,
    ``adapter_model.safetensors``), less the model card it renders each time (two thirds of its cost)."""
    import dataclasses
    from pathlib import Path

    from safetensors.torch import save_file

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in adapter_state(model).items()}
    save_file(state, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    dataclasses.replace(model.peft_config["default"], inference_mode=True).save_pretrained(str(out))


__all__ = ["adapter_state", "apply_lora", "check_targets", "linear_module_names", "load_adapter_weights",
           "load_base_model", "load_full_weights", "resolve_device", "resolve_dtype", "save_adapter"]
