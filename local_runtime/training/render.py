"""Stored conversations as SFT samples: a conversation with no token trace (a person's ``workbench play``
rollout, an imported one) rendered with the trained model's chat template into token ids, with a loss
mask of 1 on the assistant's turns and 0 on everything else (the prompt, the user's and tools' turns,
the template's role headers).

An assistant turn is what a model would have sampled there: the text the template adds after the
generation prompt (``add_generation_prompt``) of the messages before it, up to and including the end
token (the tokenizer's ``eos_token``; the glue the template writes after it, a newline, is not part
of the turn). The ids are the tokenization of the whole rendering, exactly the template's tokens; a
token is masked in when it starts inside an assistant turn. A template that does not render a
conversation prefix by prefix (it rewrites earlier turns, e.g. drops past reasoning) is refused for
that conversation in one line, rather than trained on tokens the model would not see.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench_local.models.chat_template import ChatFormatError, normalize_messages

from workbench.errors import ConfigError
from workbench.training.algorithms import Branch, TrainRollout
from workbench.training.sft_data import DataItem


class RenderError(ConfigError):
    """A stored conversation cannot be rendered as SFT data with this chat template."""


def _template(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
              generation: bool) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=generation,
                                         tokenize=False)


def _eos(tokenizer: Any) -> str | None:
    eos = getattr(tokenizer, "eos_token", None)
    if eos is None:
        eos = (getattr(tokenizer, "special", None) or {}).get("eos_token")
    return eos if isinstance(eos, str) and eos else None


def _encode_offsets(tokenizer: Any, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    if hasattr(tokenizer, "encode_offsets"):
        return tokenizer.encode_offsets(text)
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    except NotImplementedError:
        raise RenderError("rendering SFT data needs a fast tokenizer (tokenizer.json) for token offsets") from None
    return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]


def assistant_spans(tokenizer: Any, messages: list[dict[str, Any]],
                    tools: list[dict[str, Any]] | None = None) -> tuple[str, list[tuple[int, int]]]:
    """The whole rendering of ``messages`` and the character spans of its assistant turns."""
    full = _template(tokenizer, messages, tools, False)
    eos = _eos(tokenizer)
    spans: list[tuple[int, int]] = []
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        try:
            before = _template(tokenizer, messages[:i], tools, True)
        except Exception:
            if i:
                raise
            before = ""  # a template that cannot render no messages: the turn starts the text
        upto = _template(tokenizer, messages[: i + 1], tools, False)
        if not (upto.startswith(before) and full.startswith(upto)):
            raise RenderError(f"the chat template does not render message {i} (an assistant turn) as a "
                              "continuation of the messages before it, so its tokens are not what a model "
                              "would sample there")
        start, end = len(before), len(upto)
        if eos is not None and (k := upto.rfind(eos, start, end)) >= 0:
            end = k + len(eos)
        else:
            end = start + len(upto[start:end].rstrip())
        spans.append((start, end))
    if not spans:
        raise RenderError("the conversation has no assistant turn to train on")
    return full, spans


def render_conversation(tokenizer: Any, messages: Sequence[dict[str, Any]],
                        tools: list[dict[str, Any]] | None = None) -> tuple[list[int], list[int]]:
    """(token ids, loss mask) of a conversation: the chat template's tokens, 1 on the assistant's turns."""
    try:
        msgs = normalize_messages(list(messages))
    except ChatFormatError as e:
        raise RenderError(f"the conversation cannot be rendered: {e}") from None
    text, spans = assistant_spans(tokenizer, msgs, tools)
    ids, offsets = _encode_offsets(tokenizer, text)
    mask = [1 if any(s <= a < e for s, e in spans) and b > a else 0 for a, b in offsets]
    return list(ids), mask


def render_items(items: Sequence[DataItem], tokenizer: Any) -> list[TrainRollout]:
    """Every chosen item as a training rollout: its trace branches, or its conversation rendered."""
    out = []
    for item in items:
        if item.branches is not None:
            out.append(item.rollout())
            continue
        try:
            ids, mask = render_conversation(tokenizer, item.messages or [], item.tools)
        except RenderError as e:
            raise RenderError(f"rollout {item.id} of run {item.run_id}: {e}") from None
        out.append(item.rollout([Branch(ids, [0.0] * len(ids), mask)]))
    return out


def load_tokenizer(model: str, *, allow_download: bool = False) -> Any:
    """The trained model's tokenizer (with its chat template), through the tokenizer plugin."""
    from workbench_local.models.loading import resolve
    from workbench_local.models.tokenizers import TOKENIZERS

    return TOKENIZERS.load(resolve(model, allow_download=allow_download)[0])


__all__ = ["RenderError", "assistant_spans", "load_tokenizer", "render_conversation", "render_items"]
