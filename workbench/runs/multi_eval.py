"""``workbench eval ENV -m A -m B ...``: the same tasks on several models at once, one run per model.

Every run has the same environment, tasks, ``-n``/``-r``, seeds and settings; only the model differs. The
runs are grouped as a comparison: each run's config holds the ``comparison_id`` (``workbench compare``
and the app find them by it). Each run has its own store connection and writer process, so the models'
rollouts are written side by side, and one model's failure does not stop the others.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.errors import FieldError, OptionError, WorkbenchError
from workbench.runs.evaluate import EvalOptions, EvalOutcome, evaluate

#: The keys of each run's summary in a comparison's ``--json`` (the eval summary's, per model).
RUN_KEYS = ("model", "run_id", "status", "rollouts", "errors", "mean_reward", "stderr", "pass_at_k", "rewards",
            "metrics", "prompt_tokens", "completion_tokens", "cost_usd", "rollouts_per_s", "unpriced")


@dataclass(slots=True)
class Comparison:
    comparison_id: str
    outcomes: list[EvalOutcome]
    names: list[str]  # the -m values, in order

    def summary(self) -> dict[str, Any]:
        runs = []
        for name, o in zip(self.names, self.outcomes, strict=True):
            s = o.summary
            runs.append({**{k: s.get(k) for k in RUN_KEYS}, "name": name})
        return {"comparison_id": self.comparison_id, "env": self.outcomes[0].summary.get("env"),
                "env_version": self.outcomes[0].summary.get("env_version"), "runs": runs}


def new_comparison_id() -> str:
    return "cmp-" + secrets.token_hex(4)


def options_per_model(base: EvalOptions, models: list[str], comparison_id: str) -> list[EvalOptions]:
    """One option set per model, each endpoint resolved now: two names for the same endpoint and model id
    are refused before anything runs."""
    if base.resume:
        raise OptionError("EvalOptions.resume", base.resume, template="{field} finishes one run; resume each run of "
                          "a comparison on its own")
    seen: dict[tuple[str, str], str] = {}
    out = []
    for index, name in enumerate(models):
        opts = dataclasses.replace(base, model=name, comparison_id=comparison_id, comparison_index=index, endpoint=None)
        endpoint = opts.resolve()  # resolved once: each run uses exactly this endpoint
        url, model_id = endpoint.base_url, endpoint.model
        key = (url, model_id)
        if key in seen:
            raise OptionError("EvalOptions.model", name, template="{field} {first} and {field} {value} are the same "
                              "model ({model_id} at {url}); compare different models", first=seen[key],
                              model_id=model_id, url=url)
        seen[key] = name
        out.append(opts)
    return out


async def evaluate_models(base: EvalOptions, models: list[str], store_path: str | Path) -> Comparison:
    """Run ``base`` on every model of ``models`` concurrently (see the module docstring)."""
    from workbench.store import Store

    if len(set(models)) != len(models):
        dup = next(m for m in models if models.count(m) > 1)
        raise OptionError("EvalOptions.model", dup, template="{field} {value} is given twice")
    cid = new_comparison_id()
    runs = options_per_model(base, models, cid)
    stores = [Store(store_path) for _ in runs]
    try:
        results = await asyncio.gather(*(evaluate(o, s) for o, s in zip(runs, stores, strict=True)),
                                       return_exceptions=True)
    finally:
        for s in stores:
            s.close()
    failed = [(m, r) for m, r in zip(models, results, strict=True) if isinstance(r, BaseException)]
    for _, r in failed:
        if not isinstance(r, Exception):  # a cancellation or an interrupt is the whole command's
            raise r
    if failed:
        name, error = failed[0]
        if not isinstance(error, WorkbenchError):
            raise error
        done = [m for m, r in zip(models, results, strict=True) if not isinstance(r, BaseException)]
        kept = f"; the runs of {', '.join(done)} are stored" if done else ""
        if isinstance(error, FieldError):  # its fields stay data, for each face to name
            raise error.framed("{_model} {_model_given}: ", "{_kept}", names={"_model": "EvalOptions.model"},
                               _model_given=name, _kept=kept)
        raise type(error)(f"-m {name}: {error}{kept}")
    return Comparison(cid, [r for r in results if isinstance(r, EvalOutcome)], list(models))
