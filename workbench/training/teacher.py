"""The teacher of on-policy distillation: the logprob it gives each token the student sampled.

The trainer asks a teacher endpoint that serves ``prompt_logprobs`` on ``POST /v1/completions`` (vLLM, or
Workbench's own server) for every branch of every rollout in a batch, the branch's token ids sent as the
prompt so nothing is re-tokenized; the answers become ``Branch.teacher_logprobs``. Teacher and student must
share a tokenizer (the same ids mean the same text): :func:`check_same_tokenizer` compares the two servers'
``/tokenize`` of a probe text before a run starts.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from workbench.errors import ConfigError, EndpointError
from workbench.training.algorithms import Branch, TrainRollout, parse_prompt_logprobs, teacher_request

PROBE = "The teacher and the student read 12 + 30 = 42 the same way: {\"answer\": 42}."


def _post(url: str, body: dict[str, Any], timeout: float = 300.0) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return dict(json.loads(resp.read() or b"{}"))
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:300]
        raise EndpointError(f"the teacher at {url} answered HTTP {e.code}: {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise EndpointError(f"the teacher at {url} cannot be reached ({e})") from None


def server_root(base_url: str) -> str:
    """``http://host:port`` of an OpenAI-compatible ``.../v1`` base URL (where ``/tokenize`` lives)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def tokenize(base_url: str, model: str, text: str = PROBE) -> list[int]:
    data = _post(server_root(base_url) + "/tokenize", {"model": model, "prompt": text, "add_special_tokens": False},
                 timeout=60.0)
    tokens = data.get("tokens")
    if not isinstance(tokens, list):
        raise EndpointError(f"{server_root(base_url)}/tokenize answered without token ids")
    return [int(t) for t in tokens]


def check_same_tokenizer(teacher_url: str, teacher_model: str, student: Callable[[], tuple[str, str]]) -> None:
    """Refuse a teacher whose tokenizer is not the student's (its logprobs would be of other tokens).
    ``student()`` gives the student's server (base URL, model); it is asked only once the teacher answered."""
    try:
        theirs = tokenize(teacher_url, teacher_model)
    except EndpointError as e:
        raise ConfigError(f"on-policy distillation needs a teacher that tokenizes like the student and serves "
                          f"prompt_logprobs (vLLM or `workbench serve`); {teacher_url} does not answer /tokenize "
                          f"({str(e).split(': ', 1)[-1]})") from None
    student_url, student_model = student()
    ours = tokenize(student_url, student_model)
    if theirs != ours:
        raise ConfigError(f"the teacher {teacher_model} does not share the student's tokenizer (a probe text is "
                          f"{len(theirs)} tokens to it, {len(ours)} to {student_model}, and the ids differ): "
                          "on-policy distillation compares logprobs of the same token ids")


def branch_logprobs(base_url: str, model: str, branch: Branch) -> list[float]:
    """The teacher's logprob of each token of ``branch`` (0.0 for the first, which nothing predicts)."""
    url = base_url.rstrip("/") + "/completions"
    resp = _post(url, teacher_request(branch.token_ids, model))
    try:
        return parse_prompt_logprobs(resp, branch.token_ids)
    except ValueError as e:
        raise EndpointError(f"the teacher at {url}: {e}") from None


def fill_teacher_logprobs(groups: Sequence[Sequence[TrainRollout]], base_url: str, model: str,
                          concurrency: int = 8) -> int:
    """Set ``teacher_logprobs`` on every branch of the batch's usable rollouts; returns the branches scored."""
    branches = [b for g in groups for r in g if r.ok for b in r.branches if any(b.mask)]
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(branches)))) as pool:
        for b, lps in zip(branches, pool.map(lambda b: branch_logprobs(base_url, model, b), branches), strict=True):
            b.teacher_logprobs = lps
    return len(branches)


__all__ = ["check_same_tokenizer", "fill_teacher_logprobs", "server_root", "tokenize"]
