"""A stored run's environment, loaded again as the run recorded it: what its tokens are re-rendered with
and what the debugger scores a stored rollout with."""

from __future__ import annotations

from workbench.authoring import discovery
from workbench.authoring.environment import Environment
from workbench.store import Store


def load_run_env(store: Store, run_id: str) -> Environment:
    """A stored run's environment, loaded again as the run recorded it (spec, args, swapped harness)."""
    run = store.get_run(run_id)
    cfg = run.get("config") or {}
    env = discovery.load(cfg.get("env") or run.get("env_source") or run["env_name"], run.get("env_args") or {})
    if cfg.get("harness"):
        from workbench.authoring.hotswap import load_harness

        env.harness = load_harness(cfg["harness"])
    return env
