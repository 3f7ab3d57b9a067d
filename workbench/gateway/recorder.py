"""Every exchange the gateway serves, recorded without ever getting in the product's way.

Each exchange (one call and its answer) is one rollout (``source = 'traffic'``) of a run of kind ``gateway``,
one run per app and route for as long as the gateway serves (a shadow's answers in a run of their own,
``ROUTE~shadow``, each naming the answer it shadowed in ``shadow_of``): its task is the conversation as the product sent
it, its messages that conversation and the answer, its state the session, app, route, arm, API and response
id. A session is named by the product (``X-Workbench-Session``) or, without one, found by prefix continuity:
a call whose messages are an earlier call's messages and answer continues that call's session. The session is
the rollout's task index in its run, the call's place in the session its sample index.

Text is scrubbed first (``redaction.py``). Records go to the store's batch writer (its own process), off the
request path; when the store cannot be written (a commit fails, the writer process is gone), exchanges are
dropped and counted (``dropped``: every one not committed), the gateway says so once on stderr and keeps
serving, and a fresh writer is tried ``RETRY_S`` later.
"""

from __future__ import annotations

import collections
import hashlib
import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from workbench.authoring.rubric import Scores
from workbench.records.rollout import Rollout
from workbench.records.task import Task
from workbench.records.trace import message_key
from workbench.store import Store
from workbench.store.writer import RolloutRecord

from .redaction import Redactor

SOURCE = "traffic"
KIND = "gateway"
#: How long after its writer failed the recorder tries a fresh one.
RETRY_S = 30.0
#: How many conversations' ends are remembered for prefix continuity.
_REMEMBERED = 100_000


def conversation_key(messages: list[dict[str, Any]]) -> str:
    h = hashlib.sha256()
    for m in messages:
        h.update(message_key(m))
        h.update(b"\0")
    return h.hexdigest()


@dataclass(slots=True)
class _Run:
    id: str
    sessions: dict[str, int] = field(default_factory=dict)  # session -> task index
    calls: collections.Counter[str] = field(default_factory=collections.Counter)  # session -> calls recorded


class TrafficRecorder:
    """Writes exchanges to the store (``record``); ``rate`` of them are kept (the rest are not written)."""

    def __init__(self, store: Store, *, redactor: Redactor | None = None, rate: float = 1.0,
                 rng: random.Random | None = None) -> None:
        self.store = store
        self.writer = store.writer()
        self.redactor = redactor or Redactor()
        self.rate = rate
        self.rng = rng or random.Random()
        self.runs: dict[tuple[str, str], _Run] = {}
        self.ends: collections.OrderedDict[str, str] = collections.OrderedDict()  # conversation end -> session
        self.attempted = 0  # exchanges handed to a writer, or refused on the way
        self.sampled_out = 0
        self.redactions = 0
        self._committed_before = 0  # by the writers replaced after they failed
        self._failed_at: float | None = None
        self._said = False

    def session_of(self, given: str | None, messages: list[dict[str, Any]]) -> str:
        """The session a call belongs to: the one the product names, else the one whose call and answer its
        messages (up to their last assistant turn) are, else a new one."""
        if given:
            return given[:200]
        last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
        found = self.ends.get(conversation_key(messages[:last + 1])) if last >= 0 else None
        return found if found is not None else f"s-{uuid.uuid4().hex[:16]}"

    def knows_session(self, app: str, session: str) -> bool:
        """Whether a call of ``app`` was recorded in ``session`` while this gateway serves."""
        return any(a == app and session in run.sessions for (a, _), run in self.runs.items())

    def _remember(self, messages: list[dict[str, Any]], answer: dict[str, Any], session: str) -> None:
        key = conversation_key([*messages, answer])
        self.ends[key] = session
        self.ends.move_to_end(key)
        while len(self.ends) > _REMEMBERED:
            self.ends.popitem(last=False)

    def _run(self, app: str, route: str, spec: str) -> _Run:
        run = self.runs.get((app, route))
        if run is None:
            run_id = f"gw-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
            self.store.create_run(run_id, kind=KIND, env_name=f"traffic/{app}", model=route, harness="gateway",
                                  config={"app": app, "route": spec})
            run = self.runs[(app, route)] = _Run(run_id)
        return run

    def record(self, *, app: str, route: str, spec: str, arm: str, api: str, session: str,
               messages: list[dict[str, Any]], rollout: Rollout, response_id: str, shadow_of: str | None = None,
               answer_id: str | None = None, provider: str = "") -> bool:
        """Record one served exchange (never raises: a failure is a dropped exchange); whether it was sampled in.
        A shadow's answer is recorded whenever it is asked for: its primary was sampled in (the pair is whole)."""
        answer = rollout.calls[-1].message if rollout.calls else None
        if answer is None:
            return False
        if shadow_of is None:  # a shadow's answer never reached the product: no conversation continues it
            self._remember(messages, answer, session)
            if self.rate < 1.0 and self.rng.random() >= self.rate:
                self.sampled_out += 1
                return False
        self.attempted += 1
        try:
            self._check_writer()
            run = self._run(app, route if shadow_of is None else f"{route}~shadow", spec)
            index = run.sessions.setdefault(session, len(run.sessions))
            sample = run.calls[session]
            run.calls[session] += 1
            clean, n = self.redactor.messages([*messages, answer])
            self.redactions += n
            prompt = clean[:-1]
            text = clean[-1].get("content")
            state = {"session": session, "app": app, "route": route, "arm": arm, "api": api,
                     "response_id": response_id, "redactions": n, **({"shadow_of": shadow_of} if shadow_of else {}),
                     **({"answer_id": answer_id} if answer_id else {})}
            record = RolloutRecord(
                id=response_id, run_id=run.id, env_name=f"traffic/{app}", model=arm,
                task=Task(prompt=prompt, info={"session": session}), task_index=index, sample_index=sample,
                status="ok", error_kind=None, reward=None, usage=rollout.usage, duration_s=rollout.calls[-1].latency_s,
                turns=1, completion=text if isinstance(text, str) else "", messages=clean, state=state,
                scores=Scores(), calls=[], errors=[], source=SOURCE, provider=provider)
            self.writer.submit([record])
        except Exception as e:  # noqa: BLE001 - the product is never answered with the store's trouble
            self._failed(e)
        return True

    def _check_writer(self) -> None:
        """Raise the writer's failure (a failed commit, its process gone); a writer that failed
        ``RETRY_S`` ago or more is replaced by a fresh one first, so a store that can be written again is."""
        if self.writer.error is None:
            return
        now = time.monotonic()
        if self._failed_at is None:
            self._failed_at = now
        if now - self._failed_at >= RETRY_S:
            self._failed_at = now
            old, self.writer = self.writer, self.store.writer()
            try:
                old.close()
            except Exception:  # noqa: BLE001 - its failure is why it is replaced
                pass
            self._committed_before += old.committed
        error = self.writer.error
        if error is not None:
            raise error

    def _failed(self, e: BaseException) -> None:
        if not self._said:
            self._said = True
            print(f"gateway: exchanges are not being recorded ({type(e).__name__}: {e}); serving goes on, "
                  "dropped exchanges are counted", file=sys.stderr)

    @property
    def recorded(self) -> int:
        """Exchanges committed to the store."""
        return self._committed_before + self.writer.committed

    def close(self) -> None:
        """Commit what is in flight; every exchange not committed by then is counted as dropped."""
        try:
            self.writer.close()
        except Exception as e:  # noqa: BLE001 - what it did not commit is counted below
            self._failed(e)
        for run in self.runs.values():
            try:
                self.store.update_run(run.id, status="completed", finished_at=time.time(),
                                      summary={"recorded": self.recorded, "dropped": self.dropped})
            except Exception:  # noqa: BLE001 - a store that cannot be written was said already
                pass

    @property
    def dropped(self) -> int:
        """Exchanges not committed (refused, or lost with a writer that failed); exact once closed."""
        return max(0, self.attempted - self.recorded)

    def stats(self) -> dict[str, int]:
        return {"recorded": self.recorded, "dropped": self.dropped, "sampled_out": self.sampled_out,
                "redactions": self.redactions}


__all__ = ["KIND", "SOURCE", "TrafficRecorder", "conversation_key"]
