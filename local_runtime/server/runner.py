"""The model runner: runs one batch of :class:`Sequence` s to completion, and loads or unloads LoRA
adapters (peft) between batches. Only the scheduler's worker thread calls into it."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench_local.models.forward import forward_step
from workbench_local.models.loading import LoadedModel
from workbench_local.server.constraints import Constraints
from workbench_local.server.generation import (
    Detokenizer,
    Sequence,
    make_generator,
    prompt_logprob_entries,
    record_logprobs,
    sample_rows,
)


class AdapterError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(slots=True)
class Adapter:
    name: str
    path: str
    version: int
    loaded_at: float
    slot: str = ""  # its name inside the peft model (slots are reused: see Engine.load_adapter)
    config: dict[str, Any] | None = None  # its adapter_config.json, less the fields that do not shape it


#: Unloaded adapters whose LoRA layers stay in place for the next adapter of the same shape.
FREE_SLOTS = 4
_UNSHAPING = ("base_model_name_or_path", "revision", "inference_mode")


class Engine:
    def __init__(self, loaded: LoadedModel, *, logprobs_mode: str = "raw") -> None:
        self.lm = loaded
        self.base = loaded.model
        self.peft: Any = None
        self.adapters: dict[str, Adapter] = {}
        self.load_counter = 0
        self.logprobs_mode = logprobs_mode
        self.base_version = 0  # raised by update_weights (full fine-tuning publishes whole weights)
        self.tokens_generated = 0
        self.prefill_rows = 0  # prompts prefilled: identical prompts of one batch count once
        self.busy_s = 0.0
        self._no_shrink = False
        self.free: list[Adapter] = []  # unloaded adapters' slots, oldest first
        self.active = ""  # the peft adapter last made active
        self.constraints = Constraints(loaded.tokenizer, loaded.eos_ids)

    # -- adapters ----------------------------------------------------------------------------------
    def policy_version(self, model: str) -> int:
        """Which weights answer for ``model``: 0 for the base model; for an adapter, the version given
        when it was loaded, or else the server's load counter at that time (so it grows with reloads)."""
        ad = self.adapters.get(model)
        return ad.version if ad else self.base_version

    def update_weights(self, path: str, version: int | None = None) -> int:
        """Replace the base model's weights in place with the safetensors files in ``path`` (a
        ``save_pretrained`` directory of the same architecture), between batches: what full fine-tuning
        publishes after each step. Returns the new policy version of the base model."""
        from safetensors.torch import load_file

        p = Path(path).expanduser()
        files = sorted(p.glob("*.safetensors")) if p.is_dir() else []
        if not files:
            raise AdapterError(400, f"no weights at {path} (expected a directory with *.safetensors, as written by "
                                    "save_pretrained)")
        if self.adapters:
            raise AdapterError(409, f"LoRA adapters are loaded ({', '.join(sorted(self.adapters))}); unload them "
                                    "before replacing the base weights")
        state: dict[str, Any] = {}
        try:
            for f in files:
                state.update(load_file(str(f), device=str(self.lm.device)))
        except Exception as e:
            raise AdapterError(400, f"cannot read the weights at {path} ({type(e).__name__}: {e})") from None
        own = self.base.state_dict()
        unknown = [k for k in state if k not in own]
        if unknown:
            raise AdapterError(400, f"the weights at {path} do not fit {self.lm.name} (unknown tensor {unknown[0]!r})")
        for k, v in state.items():
            if v.shape != own[k].shape:
                raise AdapterError(400, f"the weights at {path} do not fit {self.lm.name} ({k} has shape "
                                        f"{tuple(v.shape)}, the model {tuple(own[k].shape)})")
        self.base.load_state_dict(state, strict=False)  # tied weights (lm_head) are absent from the files
        self.load_counter += 1
        self.base_version = self.load_counter if version is None else version
        return self.base_version

    def load_adapter(self, name: str, path: str, version: int | None = None) -> Adapter:
        p = Path(path).expanduser()
        if not (p / "adapter_config.json").is_file():
            raise AdapterError(400, f"no LoRA adapter at {path} (expected a directory with adapter_config.json, "
                                    "as written by peft's save_pretrained)")
        if name == self.lm.name:
            raise AdapterError(400, f"{name!r} is the base model's name; choose another lora_name")
        from peft import PeftModel

        try:
            config = {k: v for k, v in json.loads((p / "adapter_config.json").read_text()).items()
                      if k not in _UNSHAPING}
            if name in self.adapters:
                self._remove(name)
            slot = self._refill(p, config)
            if slot is None:  # new LoRA layers, under a peft name of their own
                slot = f"adapter-{self.load_counter + 1}"
                if self.peft is None:
                    self.peft = PeftModel.from_pretrained(self.base, str(p), adapter_name=slot, is_trainable=False)
                else:
                    self.peft.load_adapter(str(p), adapter_name=slot, is_trainable=False)
                self.peft.to(self.lm.device)
                self.peft.eval()
        except Exception as e:
            raise AdapterError(400, f"cannot load the LoRA adapter at {path} onto {self.lm.name} "
                                    f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})") from None
        self.active = ""
        self.load_counter += 1
        ad = Adapter(name, str(p), self.load_counter if version is None else version, time.time(), slot, config)
        self.adapters[name] = ad
        return ad

    def _refill(self, path: Path, config: dict[str, Any]) -> str | None:
        """Copy the adapter's weights into the slot of an unloaded adapter of the same shape (what a
        training run publishes every step), instead of building new LoRA layers; the slot, or None."""
        weights = path / "adapter_model.safetensors"
        slot = next((f for f in self.free if f.config == config), None)
        if slot is None or not weights.is_file():
            return None
        from peft.utils import set_peft_model_state_dict
        from safetensors.torch import load_file

        result = set_peft_model_state_dict(self.peft, load_file(str(weights), device=str(self.lm.device)),
                                           adapter_name=slot.slot)
        if getattr(result, "unexpected_keys", None):
            return None  # not this slot's tensors after all: build new layers
        self.free.remove(slot)
        return slot.slot

    def _remove(self, name: str) -> None:
        ad = self.adapters.pop(name)
        self.active = ""
        if not self.adapters:
            self.base = self.peft.unload()  # removes the LoRA layers without merging: the exact base weights
            self.peft, self.free = None, []
            return
        self.free.append(ad)
        while len(self.free) > FREE_SLOTS:
            self.peft.delete_adapter(self.free.pop(0).slot)

    def unload_adapter(self, name: str) -> None:
        if name not in self.adapters:
            raise AdapterError(404, f"no LoRA adapter named {name!r} is loaded")
        self._remove(name)

    def _model_for(self, name: str) -> tuple[Any, Any]:
        """(the module to call, a context manager to run it in) for a served model name."""
        import contextlib

        if name in self.adapters:
            slot = self.adapters[name].slot
            if slot != self.active:  # set_adapter walks every module: only when it changes
                self.peft.set_adapter(slot)
                self.active = slot
            return self.peft, contextlib.nullcontext()
        if name != self.lm.name:
            raise RuntimeError(f"the LoRA adapter {name!r} was unloaded before this request ran")
        if self.peft is not None:
            return self.peft, self.peft.disable_adapter()
        return self.base, contextlib.nullcontext()

    # -- generation --------------------------------------------------------------------------------
    def prepare(self, seq: Sequence) -> None:
        """Set up the sequence's sampler (called before queueing), with max_tokens clipped to what the
        context leaves after the prompt. The prompt is never cut: the server refuses a prompt that does
        not fit (prepare.check_context) before it gets here."""
        ctx = self.lm.context_len
        seq.params.max_tokens = max(0, min(seq.params.max_tokens, ctx - len(seq.prompt_ids)))
        seq.generator = make_generator(seq.params.seed)
        seq.detok = Detokenizer(self.lm.tokenizer)
        seq.policy_version = self.policy_version(seq.model)

    def run_batch(self, seqs: list[Sequence]) -> None:
        """Generate every sequence to its end. All sequences use the same model or adapter."""
        import torch

        t0 = time.perf_counter()
        try:
            with torch.inference_mode():
                self._run(seqs)
        except Exception as e:  # a failure ends this batch's requests with an error, never the server
            msg = f"generation failed ({type(e).__name__}: {e})"
            for s in seqs:
                if not s.finished:
                    s.error = msg
                    s.finish_reason = "error"
                    self._emit(s)
        finally:
            self.busy_s += time.perf_counter() - t0

    def _emit(self, seq: Sequence) -> None:
        if seq.on_event is not None:
            seq.on_event(seq)

    def _finish(self, seq: Sequence, reason: str, stop_reason: str | int | None = None) -> None:
        if seq.detok is not None and not isinstance(stop_reason, str):  # a stop string already cut the text
            seq.detok.flush()
            seq.text = seq.detok.text
        seq.finish_reason, seq.stop_reason = reason, stop_reason

    def _run(self, seqs: list[Sequence]) -> None:
        import torch

        lm, dev = self.lm, self.lm.device
        model, ctxmgr = self._model_for(seqs[0].model)
        for s in seqs:  # the weights that actually run (an adapter may have been reloaded since queueing)
            s.policy_version = self.policy_version(s.model)
        live = [s for s in seqs if not s.cancelled]
        for s in seqs:
            if s.cancelled:
                self._finish(s, "abort")
            elif s.params.max_tokens <= 0 and s.params.prompt_logprobs is None:
                self._finish(s, "length")
                self._emit(s)
        live = [s for s in live if not s.finished]
        if not live:
            return
        width = max(len(s.prompt_ids) for s in live)
        want_prompt_lp = any(s.params.prompt_logprobs is not None for s in live)
        # Identical prompts (the rollouts of one group) are prefilled once and their KV cache copied.
        first: dict[tuple[int, ...], int] = {}
        of = [first.setdefault(tuple(s.prompt_ids), len(first)) for s in live]
        shared = len(first) < len(live) and not want_prompt_lp and not self._no_shrink
        prompts = [list(p) for p in first] if shared else [s.prompt_ids for s in live]
        ids = torch.full((len(prompts), width), lm.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        with ctxmgr:
            logits, cache = forward_step(model, ids, mask, pos, None, all_logits=want_prompt_lp)
            self.prefill_rows += len(prompts)
            if shared:
                rows_of = torch.tensor(of, device=dev)
                if self._select_rows(cache, rows_of):
                    logits, mask, pos = logits[rows_of], mask[rows_of], pos[rows_of]
                else:  # this cache cannot copy rows: prefill every prompt after all
                    ids, mask = ids[rows_of], mask[rows_of]
                    pos = (mask.cumsum(-1) - 1).clamp(min=0)
                    logits, cache = forward_step(model, ids, mask, pos, None)
                    self.prefill_rows += len(live)
            if want_prompt_lp:
                for i, s in enumerate(live):
                    if s.params.prompt_logprobs is not None:
                        n = len(s.prompt_ids)
                        s.prompt_logprobs = prompt_logprob_entries(
                            lm.tokenizer, s.prompt_ids, logits[i, width - n: width - 1], s.params.prompt_logprobs)
            last = logits[:, -1, :]
            for s in live:
                if s.params.max_tokens <= 0:
                    self._finish(s, "length")
                    self._emit(s)
            rows = live
            while True:
                idx = [i for i, s in enumerate(rows) if not s.finished]
                if not idx:
                    break
                step = [rows[i] for i in idx]
                here = last if len(idx) == len(rows) else last[idx]
                allowed = None
                if any(s.matcher is not None for s in step):
                    allowed = self.constraints.allowed([s.matcher for s in step], here.shape[-1], here.device)
                tokens, reported = sample_rows(here, step, self.logprobs_mode, allowed)
                for j, i in enumerate(idx):
                    self._step(rows[i], tokens[j], reported[j])
                self.tokens_generated += len(idx)
                chosen = dict(zip(idx, tokens, strict=True))
                alive = [i for i in idx if not rows[i].finished]
                if not alive:
                    break
                if len(alive) < len(rows) and self._shrink(cache, alive):
                    keep = torch.tensor(alive, device=dev)
                    mask, pos, rows = mask[keep], pos[keep], [rows[i] for i in alive]
                    nxt = [chosen[i] for i in alive]
                else:  # finished rows ride along on padding until the batch ends
                    nxt = [chosen.get(i, lm.pad_id) for i in range(len(rows))]
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                pos = pos[:, -1:] + 1
                logits, cache = forward_step(model, torch.tensor(nxt, dtype=torch.long, device=dev)[:, None], mask,
                                             pos, cache)
                last = logits[:, -1, :]

    def _shrink(self, cache: Any, alive: list[int]) -> bool:
        """Drop finished rows from the KV cache, when the cache type allows it."""
        if self._no_shrink:
            return False
        import torch

        return self._select_rows(cache, torch.tensor(alive, device=self.lm.device))

    def _select_rows(self, cache: Any, rows: Any) -> bool:
        """Make the KV cache's rows ``rows`` (dropping some, or repeating one), when its type allows it."""
        try:
            cache.batch_select_indices(rows)
            return True
        except (AttributeError, NotImplementedError, TypeError):
            self._no_shrink = True
            return False

    def _constraint_failed(self, s: Sequence) -> None:
        s.error = f"constrained decoding failed: {' '.join(s.matcher.get_error().split())[:300]}"
        self._finish(s, "error")

    def _step(self, s: Sequence, tok: int, row: Any) -> None:
        p = s.params
        s.out_ids.append(tok)
        if p.logprobs:
            record_logprobs(s, tok, row)
        if s.cancelled:
            self._finish(s, "abort")
        elif s.matcher is not None and s.matcher.is_error():  # its mask left only the end of sequence
            self._constraint_failed(s)
        elif (tok in self.lm.eos_ids and not p.ignore_eos) or tok in p.stop_token_ids:
            self._finish(s, "stop", None if tok in self.lm.eos_ids else tok)
        elif s.matcher is not None and not s.matcher.consume_token(tok):
            self._constraint_failed(s)
        else:
            assert s.detok is not None
            before = len(s.detok.text)
            s.detok.add(tok)
            s.text = s.detok.text
            if p.stop:
                lo = max(0, before - max(len(x) for x in p.stop) + 1)
                hits = [(s.text.find(x, lo), x) for x in p.stop if x and s.text.find(x, lo) >= 0]
                if hits:
                    at, which = min(hits)
                    s.text = s.text[:at]
                    self._finish(s, "stop", which)
            if not s.finished and len(s.out_ids) >= p.max_tokens:
                self._finish(s, "length")
        self._emit(s)
