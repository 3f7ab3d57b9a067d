"""Loading a model for the embedded server: ``tiny`` (built at first use), a local directory, or a
Hugging Face id, all through ``AutoModelForCausalLM`` / ``AutoTokenizer``; every failure ends in one
clear sentence (:class:`ModelLoadError`) instead of a traceback."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench_local.models.chat_template import NO_TEMPLATE_HINT

from workbench.errors import ConfigError

#: The names of the embedded default model (``-m local`` in the docs: the model this machine serves).
TINY_ALIASES = frozenset({"tiny", "local", "workbench-tiny", "workbench-tiny-v1"})


class ModelLoadError(ConfigError):
    """The model, its tokenizer or an adapter cannot be loaded."""


@dataclass(slots=True)
class LoadedModel:
    model: Any
    tokenizer: Any
    name: str
    source: str
    context_len: int
    eos_ids: set[int]
    pad_id: int
    device: str
    has_chat_template: bool
    warnings: list[str] = field(default_factory=list)


def _looks_like_path(spec: str) -> bool:
    """A Hugging Face id is ``name`` or ``org/name``; anything else with a slash is a path."""
    return spec.startswith(("/", ".", "~")) or spec.count("/") > 1 or (os.sep != "/" and os.sep in spec)


def resolve(spec: str | None, *, allow_download: bool = False, log: Any = None) -> tuple[str, str]:
    """(what to pass to ``from_pretrained``, the served model name)."""
    from workbench_local.models.tiny_model import SERVED_NAME, ensure_tiny_model

    if spec is None or spec in TINY_ALIASES:
        return str(ensure_tiny_model(log=log)), SERVED_NAME
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelLoadError(f"{spec} is a directory but not a model (no config.json); pass a directory written "
                                 "by save_pretrained, a Hugging Face model id, or --model tiny")
        return str(path), spec
    if path.exists() or _looks_like_path(spec):
        raise ModelLoadError(f"no model directory at {spec}; pass a directory written by save_pretrained, a Hugging "
                             "Face model id (e.g. Qwen/Qwen2.5-0.5B-Instruct), or --model tiny")
    try:
        from huggingface_hub import snapshot_download

        local = snapshot_download(spec, local_files_only=not allow_download,
                                  allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.py"])
    except Exception as e:
        kind = type(e).__name__
        if allow_download:
            raise ModelLoadError(f"cannot download model {spec!r} from the Hugging Face Hub ({kind}); check the id "
                                 "and your network, or pass a local directory") from None
        raise ModelLoadError(f"model {spec!r} is not a local directory and is not in the Hugging Face cache; download "
                             f"it first (`huggingface-cli download {spec}`), rerun with --allow-download, or pass a "
                             "local directory or --model tiny") from None
    return local, spec


def _device(choice: str) -> str:
    import torch

    if choice != "auto":
        return choice
    return "cuda" if torch.cuda.is_available() else "cpu"


def load(spec: str | None, *, served_name: str | None = None, dtype: str = "auto", device: str = "auto",
         chat_template: str | None = None, max_model_len: int | None = None, allow_download: bool = False,
         trust_remote_code: bool = False, log: Any = None) -> LoadedModel:
    if not allow_download:
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
    source, name = resolve(spec, allow_download=allow_download, log=log)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except Exception as e:
        raise ModelLoadError(f"cannot load the tokenizer of {spec or name} ({type(e).__name__}: "
                             f"{str(e).splitlines()[0][:200] if str(e) else ''})") from None
    warnings: list[str] = []
    if chat_template:
        tpl = Path(chat_template).expanduser()
        if not tpl.is_file():
            raise ModelLoadError(f"--chat-template {chat_template}: no such file")
        tokenizer.chat_template = tpl.read_text()
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if not has_template:
        warnings.append(f"the tokenizer of {name} has no chat template, so /v1/chat/completions will refuse "
                        f"requests; {NO_TEMPLATE_HINT}")
    dev = _device(device)
    torch_dtype: Any = {"auto": torch.float32 if dev == "cpu" else "auto", "float32": torch.float32,
                        "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    if torch_dtype is None:
        raise ModelLoadError(f"--dtype {dtype}: use auto, float32, bfloat16 or float16")
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, trust_remote_code=trust_remote_code)
    except Exception as e:
        raise ModelLoadError(f"cannot load model {spec or name} ({type(e).__name__}: "
                             f"{str(e).splitlines()[0][:200] if str(e) else ''})") from None
    model.to(dev)  # type: ignore[arg-type]  # transformers' stubs wrap .to so that mypy takes dev for self
    model.eval()
    cfg = model.config
    ctx = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None) or 2048
    if max_model_len:
        ctx = min(ctx, max_model_len) if getattr(cfg, "max_position_embeddings", None) else max_model_len
    eos: set[int] = set()
    for val in (tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(val, int):
            eos.add(val)
        elif isinstance(val, list | tuple):
            eos.update(int(v) for v in val)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (min(eos) if eos else 0)
    return LoadedModel(model=model, tokenizer=tokenizer, name=served_name or name, source=source,
                       context_len=int(ctx), eos_ids=eos, pad_id=int(pad), device=dev,
                       has_chat_template=has_template, warnings=warnings)
