"""SFT on stored trajectories: ``workbench train ENV --algorithm.name sft --data RUN [--data RUN ...]``.

The orchestrator chooses the data once, before any process starts (:func:`select`): every rollout of
the named runs that finished without an error (and, with ``algorithm.min_reward``, reached it). A
rollout with a token trace (a model run) keeps its exact trace branches; one without (``workbench play``'s
human rollouts, ``workbench import``'s conversations) is kept as its conversation, its messages and the
tool schemas it was offered, for the trainer to render with the trained model's chat template
(``workbench_local.training.render``: the domain never tokenizes). The choice goes to the run directory
as ``data.json`` (:func:`write`, :func:`read`), which the trainer reads and cycles through in epochs.

Where a conversation's tools come from: its trace (each call's tool schemas), the tools its rollout
was offered (kept in its state), an import's own ``tools``, else the trained environment's harness
when the data run is of that environment.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.errors import ConfigError
from workbench.fsutil import atomic_write
from workbench.records.rollout import OFFERED_TOOLS
from workbench.records.trace import Trace
from workbench.store.train_records import conversation_rollouts, run_kind_and_env
from workbench.training.algorithms import Branch, TrainRollout

DATA_FILE = "data.json"

Message = dict[str, Any]


@dataclass(slots=True)
class DataItem:
    """One chosen rollout: its trace branches, or (no tokens) its conversation to render."""

    id: str
    run_id: str
    group_id: str
    reward: float | None
    source: str
    branches: list[Branch] | None = None  # token ids, logprobs and the sampled mask, as traced
    messages: list[Message] | None = None  # the conversation, when there is no trace to train on
    tools: list[dict[str, Any]] | None = None

    def rollout(self, branches: list[Branch] | None = None) -> TrainRollout:
        """As the SFT algorithm takes it: a chosen demonstration (``gold``), of no policy version."""
        return TrainRollout(self.id, self.group_id, self.reward, branches if branches is not None else
                            list(self.branches or []), "ok", gold=True)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "run_id": self.run_id, "group_id": self.group_id, "reward": self.reward,
                             "source": self.source}
        if self.branches is not None:
            d["branches"] = [{"token_ids": b.token_ids, "logprobs": b.logprobs, "mask": b.mask} for b in self.branches]
        else:
            d["messages"], d["tools"] = self.messages, self.tools
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DataItem:
        branches = None
        if d.get("branches") is not None:
            branches = [Branch(list(b["token_ids"]), list(b["logprobs"]), list(b["mask"])) for b in d["branches"]]
        return cls(d["id"], d["run_id"], d["group_id"], d.get("reward"), d.get("source", "model"), branches,
                   d.get("messages"), d.get("tools"))


def _has_assistant(messages: Sequence[Message]) -> bool:
    return any(isinstance(m, dict) and m.get("role") == "assistant" for m in messages)


def _trace_tools(trace: Trace | None) -> list[dict[str, Any]] | None:
    if trace is None or not trace.call_tools:
        return None
    return next((t for t in trace.call_tools if t), None)


#: The environment name of an import that named none: conversations of no environment, not another's.
NO_ENV = "imported"


def select(conn: sqlite3.Connection, run_ids: Sequence[str], *, min_reward: float | None = None,
           tools_for: Callable[[str], list[dict[str, Any]] | None] | None = None, env_name: str | None = None,
           allow_other_env: bool = False) -> tuple[list[DataItem], dict[str, Any]]:
    """The SFT data of ``run_ids``: (chosen rollouts in run then commit order, counts per run).

    ``tools_for(env_name)`` gives the tool schemas to render a conversation of that environment with when
    the store has none for it. A run that does not exist, a run with no usable rollout, a conversation
    with no assistant turn, and (unless ``allow_other_env``) a run of an environment other than
    ``env_name``, the one trained, are each a :class:`ConfigError` of one line. With ``allow_other_env``
    such a run's counts name its environment (``other_env``)."""
    if not run_ids:
        raise ConfigError("no data runs: pass --data RUN (a run id from `workbench runs`)")
    items: list[DataItem] = []
    counts: dict[str, Any] = {}
    run_envs: dict[str, str] = {}
    for run_id in dict.fromkeys(run_ids):
        row = run_kind_and_env(conn, run_id)
        if row is None:
            raise ConfigError(f"--data {run_id}: there is no run {run_id!r} in this store (see `workbench runs`)")
        run_envs[run_id] = row[1]
    others = {r: e for r, e in run_envs.items() if env_name and e not in (env_name, NO_ENV)}
    if others and not allow_other_env:
        run_id, other = next(iter(others.items()))
        raise ConfigError(f"--data {run_id} is a run of {other!r}, not of {env_name!r}, the environment trained; "
                          f"pass --allow-other-env to train {env_name} on it anyway")
    for run_id in run_envs:
        kind, env_name_of_run = run_kind_and_env(conn, run_id) or ("", "")
        total = errored = below = 0
        chosen: list[DataItem] = []
        for rid, task_index, reward, status, source, messages, state, nodes, ids, lps, mask in conversation_rollouts(conn, run_id):
            total += 1
            if status != "ok" or (reward is not None and not math.isfinite(reward)):
                errored += 1
                continue
            if min_reward is not None and (reward is None or reward < min_reward):
                below += 1
                continue
            trace = Trace.unpack(nodes, ids, lps, mask) if nodes is not None else None
            group = f"{run_id}:{task_index}"
            if trace is not None and trace.has_tokens:
                branches = [Branch(*trace.sequence(path)) for path in trace.branches()]
                if any(any(b.mask) for b in branches):
                    chosen.append(DataItem(rid, run_id, group, reward, source, branches=branches))
                    continue
            msgs = json.loads(messages or "[]")
            if not isinstance(msgs, list) or not _has_assistant(msgs):
                raise ConfigError(f"--data {run_id}: rollout {rid} has no assistant turn to train on "
                                  "(SFT learns the assistant's messages); leave that run out or re-import without it")
            kept = json.loads(state or "{}") or {}
            imported = kept.get("import") or {}
            offered = kept.get(OFFERED_TOOLS)
            tools = _trace_tools(trace) or (offered if isinstance(offered, list) else None) \
                or (imported.get("tools") if isinstance(imported, dict) else None) \
                or (tools_for(env_name_of_run) if tools_for is not None else None)
            chosen.append(DataItem(rid, run_id, group, reward, source, messages=msgs, tools=tools or None))
        if not chosen:
            why = ("it has no rollouts" if not total else
                   f"all {total} of its rollouts are left out ({errored} errored"
                   + (f", {below} below algorithm.min_reward {min_reward}" if min_reward is not None else "") + ")")
            raise ConfigError(f"--data {run_id}: the {kind} run has no usable rollouts: {why}")
        counts[run_id] = {"kind": kind, "rollouts": len(chosen), "errored": errored, "below_min_reward": below,
                          "rendered": sum(1 for c in chosen if c.branches is None)}
        if run_id in others:
            counts[run_id]["other_env"] = env_name_of_run
        items += chosen
    return items, counts


def write(run_dir: Path, items: Sequence[DataItem]) -> Path:
    """The chosen data as ``run_dir/data.json`` (written to a temporary name, then renamed)."""
    path = run_dir / DATA_FILE
    atomic_write(path, json.dumps([i.to_json() for i in items]))
    return path


def read(run_dir: Path) -> list[DataItem]:
    path = run_dir / DATA_FILE
    try:
        return [DataItem.from_json(d) for d in json.loads(path.read_text())]
    except FileNotFoundError:
        raise ConfigError(f"the SFT data of this run ({path}) is missing; start the run again with --data") from None


class Batches:
    """Endless batches of ``size`` indices of ``n`` items, in a fresh shuffle every epoch, from stream
    position ``position`` (what a resumed run continues from); a batch never holds an item twice."""

    def __init__(self, n: int, size: int, seed: int, position: int = 0) -> None:
        if n < 1:
            raise ConfigError("there is no SFT data to train on")
        self.n, self.size, self.seed, self.position = n, max(1, min(size, n)), seed, position

    def _order(self, epoch: int) -> list[int]:
        import random

        idx = list(range(self.n))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(idx)
        return idx

    def next(self) -> list[int]:
        out: list[int] = []
        while len(out) < self.size:
            epoch, k = divmod(self.position, self.n)
            i = self._order(epoch)[k]
            self.position += 1
            if i not in out:  # across an epoch's end an item may come round again: skip it
                out.append(i)
        return out


__all__ = ["DATA_FILE", "Batches", "DataItem", "read", "select", "write"]
