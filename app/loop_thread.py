"""An event loop on its own thread, for work that lives across several user actions.

A debug session holds a rollout paused between turns: its HTTP client, sandboxes and store
connection belong to one event loop, which must outlive any single worker. Environment code
(tools, rewards) may block; on this thread it never freezes the interface.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """``submit(coro)`` runs a coroutine on the thread's loop; ``stop()`` ends the thread."""

    def __init__(self, name: str = "workbench-loop") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._loop.is_closed()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def stop(self, timeout: float = 10.0) -> None:
        if self.alive:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
