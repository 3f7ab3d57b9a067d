"""The launch pre-flight: what a launch would cost and whether it may start, before anything starts.

``workbench launch`` (``--plan`` too), the ``plan_launch`` MCP tool and the app's launch dialog call
:func:`preflight`: the chosen launch backend (a ``workbench.backends`` plugin, found through the registry)
plans the run and judges it by the run and monthly budgets, the memory fit and, when asked, its
credentials. :func:`backends` lists the registered backends for a chooser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workbench.errors import ConfigError


@dataclass(frozen=True, slots=True)
class BackendChoice:
    """A registered launch backend as a chooser shows it."""

    name: str
    label: str  # e.g. "local (this machine's CPU)"
    takes: str  # "run" (a resolved run config, on this machine) | "launch" (a cluster plan)


@dataclass(slots=True)
class Preflight:
    """The backend's verdict on a launch. ``forecast`` is the backend's own forecast (what the app's plan
    panel shows); ``refusal`` the sentence a launch is refused with (None: it may start), of which
    ``budget_problem`` is the budgets' part; ``plan`` the cluster plan (None for a backend that runs a
    resolved config here) and ``launch_config`` what its ``launch`` takes when planned."""

    backend: str
    forecast: Any

    @property
    def refusal(self) -> str | None:
        return self.forecast.refusal

    @property
    def budget_problem(self) -> str | None:
        return getattr(self.forecast, "budget_problem", self.forecast.refusal)

    @property
    def budget_error(self) -> Exception | None:
        """The budgets' refusal as the error itself (a field error names its fields in each face's words)."""
        return getattr(self.forecast, "budget_error", None)

    @property
    def plan(self) -> Any:
        return getattr(self.forecast, "plan", None)

    @property
    def launch_config(self) -> Any:
        return getattr(self.forecast, "launch", None)

    def raise_if_refused(self) -> None:
        """Raise the refusal as a :class:`ConfigError` (as ``workbench launch`` refuses)."""
        if self.refusal is not None:
            raise ConfigError(self.refusal)


def backends() -> list[BackendChoice]:
    """Every registered launch backend that loads here, by name (one that cannot be imported is left out)."""
    from workbench import plugins

    out = []
    for name in plugins.names("backends"):
        try:
            backend = plugins.load("backends", name)
        except plugins.PluginError:
            continue
        out.append(BackendChoice(name, str(getattr(backend, "label", "") or name), str(getattr(backend, "takes", ""))))
    return out


def cluster_planner() -> str:
    """The backend whose plan ``workbench launch --plan`` and ``plan_launch`` show when no backend is named:
    the first registered one that launches a cluster plan."""
    for choice in backends():
        if choice.takes == "launch":
            return choice.name
    raise ConfigError("no installed launch backend plans a cluster; install one (bundled: pip install "
                      "'rl-workbench[cloud]') or pick --backend local")


def preflight(conn: Any, backend: str | None, *, env: str | None, config_file: str | None = None,
              max_steps: int | None = None, budget_usd: float | None = None,
              overrides: dict[str, Any] | None = None, credentials: bool = False) -> Preflight:
    """The pre-flight of launching ``env`` on ``backend`` (None: the cluster plan of :func:`cluster_planner`)
    with ``config_file`` and dotted ``overrides``, ``max_steps`` and the run's ``budget_usd``, the month's
    spend read through ``conn``. ``credentials``: also check the backend's login (a missing one raises).
    A config that cannot be planned raises its ``ConfigError``; a refused plan is a verdict, not an error."""
    from workbench.training.backends import backend as load_backend

    name = backend or cluster_planner()
    chosen = load_backend(name)
    forecast = chosen.preflight(conn, env=env, config_file=config_file, max_steps=max_steps, budget_usd=budget_usd,
                                overrides=overrides)
    if credentials and getattr(forecast, "refusal", None) is None:
        chosen.check_credentials()
    return Preflight(name, forecast)


def max_trainer_nodes(backend: Any) -> int:
    """The most trainer nodes ``backend`` runs: its ``max_trainer_nodes``; one for a backend that does not say."""
    most = getattr(backend, "max_trainer_nodes", 1)
    return most if isinstance(most, int) and not isinstance(most, bool) and most >= 1 else 1


def check_trainer_nodes(backend: Any, nodes: int) -> None:
    """Refuse, in one line and before anything starts, a trainer of ``nodes`` nodes that ``backend`` cannot run."""
    if nodes < 1:
        raise ConfigError(f"the trainer needs at least 1 node, not {nodes}")
    most = max_trainer_nodes(backend)
    if nodes > most:
        name = getattr(backend, "name", "?")
        can = "runs a trainer on one node only" if most == 1 else f"runs a trainer on at most {most} nodes"
        raise ConfigError(f"--nodes {nodes}: launch backend {name!r} {can} (its max_trainer_nodes)")


def plan_trainer_nodes(plan: Any) -> int:
    """The trainer nodes of a cluster plan: its trainer GPUs in whole nodes (a part of a node is one)."""
    return max(1, -(-int(plan.trainer_gpus) // int(plan.gpus_per_node)))


__all__ = ["BackendChoice", "Preflight", "backends", "check_trainer_nodes", "cluster_planner", "max_trainer_nodes",
           "plan_trainer_nodes", "preflight"]
