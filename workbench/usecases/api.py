"""The Python API for the main jobs: ``wb.eval(...)`` and ``wb.compare(...)``.

Each runs the use case the command of the same name runs and returns what its ``--json`` prints:
``wb.eval`` an :class:`~workbench.usecases.evaluation.EvalSummary`, ``wb.compare`` a
:class:`~workbench.usecases.comparison.Comparison` (both plain dicts). Heavy imports wait for the call,
so ``import workbench`` stays light.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.usecases.comparison import Comparison
    from workbench.usecases.evaluation import EvalSummary


def _run(coro: Any) -> Any:
    """Run ``coro`` to its end, also from code that already runs an event loop (a notebook)."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def eval(env: str, *, model: str | None = None, base_url: str | None = None, api_key: str | None = None,
         n: int | None = None, rollouts: int = 1, concurrency: int = 32, env_args: dict[str, Any] | None = None,
         temperature: float | None = None, max_tokens: int | None = None, timeout: float = 600.0,
         max_retries: int = 4, harness: str | None = None, runtime: str | None = None,
         pass_threshold: float = 1.0, db: str | Path | None = None) -> EvalSummary:
    """Evaluate ``env`` (a bundled name, a ``.py`` file, a package directory or a module) as ``workbench
    eval`` does, store every rollout in ``db`` (else ``$WORKBENCH_DB``, else the default store) and return
    the run's summary, the object ``workbench eval --json`` prints.

    ``model`` is a model id at ``base_url`` (an OpenAI-compatible endpoint) or a registered model
    (``workbench models``); with neither, the embedded model. ``n`` takes the first n tasks, ``rollouts``
    runs each that many times (one group). Raises a :class:`~workbench.errors.WorkbenchError` for a wrong
    argument, and :class:`~workbench.usecases.evaluation.EveryRolloutFailed` (its ``summary`` attached)
    when no rollout got an answer from the model."""
    from workbench.runs.evaluate import EvalOptions
    from workbench.store.opening import open_store
    from workbench.usecases.evaluation import run_eval

    opts = EvalOptions(env=env, env_args=dict(env_args or {}), n=n, rollouts_per_task=rollouts,
                       concurrency=concurrency, model=model, base_url=base_url, api_key=api_key, timeout_s=timeout,
                       max_retries=max_retries, harness=harness, runtime=runtime, temperature=temperature,
                       max_tokens=max_tokens, pass_threshold=pass_threshold)
    with open_store(db) as store:
        result = _run(run_eval(opts, store))
    failure = result.failure(f"`workbench show {result.run_id}` has the details")
    if failure is not None:
        raise failure
    return result.summary


def compare(runs: str | list[str], *, baseline: str | None = None, pass_threshold: float = 1.0,
            allow_mismatch: bool = False, db: str | Path | None = None) -> Comparison:
    """Compare stored runs (run ids, or the id of a comparison from ``eval -m A -m B``) as ``workbench
    compare`` does, and return the object its ``--json`` prints: per run the mean reward with a 95% CI,
    pass@k, errors, tokens, cost and latency; against ``baseline`` (default: the first) the paired
    per-task difference with its CI and the tasks that regressed."""
    from workbench.store.opening import open_store
    from workbench.usecases.comparison import compare as compare_runs

    targets = [runs] if isinstance(runs, str) else list(runs)
    with open_store(db, read_only_ok=True, existing=True) as store:
        return compare_runs(store.conn, targets, baseline, pass_threshold, allow_mismatch)


__all__ = ["compare", "eval"]
