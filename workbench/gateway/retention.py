"""How long recorded traffic is kept: ``--retain-days D`` (exchanges older than D days are deleted) and
``--retain-exchanges N`` (only the newest N are kept), together or alone.

A gateway started with a limit applies it when it starts and every :data:`EVERY_S` seconds while it serves, on
a connection of its own in a worker thread, in short transactions (the store's ``prune_traffic``): serving and
recording never wait on it. ``workbench gateway prune`` applies a limit once. What is deleted goes whole: the
exchange with its scores, calls, full-text entry and feedback, the feedback of sessions none of whose exchanges
is left, and the finished gateway runs left empty.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import ConfigError
from workbench.store import Store
from workbench.store.traffic import prune_traffic

#: How often a serving gateway applies its limit.
EVERY_S = 600.0
_DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class Retention:
    """A retention limit: by age (``days``), by count (``exchanges``), or both."""

    days: float | None = None
    exchanges: int | None = None

    def __post_init__(self) -> None:
        if self.days is not None and not self.days > 0:
            raise ConfigError(f"--retain-days {self.days:g}: a number of days above 0")
        if self.exchanges is not None and self.exchanges < 0:
            raise ConfigError(f"--retain-exchanges {self.exchanges}: a number of exchanges, 0 or more")

    @property
    def limited(self) -> bool:
        return self.days is not None or self.exchanges is not None

    def describe(self) -> str:
        parts = [f"{self.days:g} days" if self.days is not None else "",
                 f"the newest {self.exchanges:,} exchanges" if self.exchanges is not None else ""]
        return " and ".join(p for p in parts if p) or "everything"

    def apply(self, store_path: Path, *, app: str | None = None, now: float | None = None) -> dict[str, int]:
        """Delete what the limit does not keep, on a connection of its own; what was deleted, counted."""
        before = (now if now is not None else time.time()) - self.days * _DAY_S if self.days is not None else None
        with Store(store_path) as store:
            return prune_traffic(store.conn, before=before, keep=self.exchanges, app=app)


async def keep_applying(retention: Retention, store_path: Path, every_s: float = EVERY_S) -> None:
    """Apply ``retention`` now and every ``every_s`` seconds until cancelled. A failure is said on stderr once
    and tried again next time: the gateway serves on."""
    said = False
    while True:
        try:
            await asyncio.to_thread(retention.apply, store_path)
        except Exception as e:  # noqa: BLE001 - retention never stops serving
            if not said:
                said = True
                print(f"gateway: the retention limit could not be applied ({type(e).__name__}: {e}); "
                      f"trying again every {every_s:g} s", file=sys.stderr)
        await asyncio.sleep(every_s)


__all__ = ["EVERY_S", "Retention", "keep_applying"]
