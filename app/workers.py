"""The app's one way to run work off the UI thread, and to hear back from it.

Domain work (loading an environment, an eval, a re-score, a launch, a store query) runs in a Textual
worker: ``@work(thread=True)`` or ``run_worker(..., thread=True)`` where it blocks, ``@work`` (on the UI
loop) where it only awaits. A thread worker reports back by posting a typed :class:`~textual.message.Message`
to the screen or widget that started it (:func:`post_ui`); the screen handles it on the UI thread.

Two kinds of work need an event loop of their own, and get it here, exposed through the same workers:

- :class:`CancellableRun` runs async domain code (``evaluate``, ``rescore``, ``validate_env``) to its end
  on a private loop inside one thread worker, cancellable from the UI thread (escape stops a quick eval).
- :class:`SessionLoop` keeps one loop alive across many user actions (a debug session paused between
  turns, a rollout played by hand): its clients, sandboxes and store connection belong to that loop, which
  must outlive any one worker. The UI side awaits it in an ``@work`` worker (:meth:`SessionLoop.run`).

Nothing in the app calls ``call_from_thread``: a worker's result is a message, and a worker's notification
is Textual's own ``Notify`` message (:func:`notify_ui`). ``tests/app/test_workers.py`` fails when code
elsewhere in ``app/`` starts a thread, makes an event loop or calls ``call_from_thread``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from textual.message import Message
    from textual.notifications import SeverityLevel

T = TypeVar("T")


class MessageTarget(Protocol):
    """A screen or widget, or what a controller sees of one: something a message can be posted to."""

    def post_message(self, message: Message) -> bool: ...


class Notifier(Protocol):
    """A screen or widget, or what a controller sees of one: something that shows a notification."""

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...


def post_ui(target: MessageTarget, message: Message) -> None:
    """Post ``message`` to ``target`` (a screen or widget) from a worker thread: ``post_message`` is
    thread-safe; a no-op once the app (or its loop) has stopped."""
    try:
        target.post_message(message)
    except RuntimeError:  # the loop is closed: nobody to tell
        pass


def notify_ui(node: Notifier, message: str, **kwargs: Any) -> None:
    """A notification from a worker thread: ``notify`` posts Textual's own ``Notify`` message, which is
    thread-safe; a no-op once the app (or its loop) has stopped."""
    try:
        node.notify(message, **kwargs)
    except RuntimeError:  # the loop is closed: nobody to tell
        pass


class CancellableRun:
    """Runs a coroutine on a private event loop in the current (worker) thread; cancellable from any thread."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._cancelled = False

    def run(self, make: Callable[[], Awaitable[T]]) -> T:
        async def main() -> T:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task()
            if self._cancelled:
                raise asyncio.CancelledError
            return await make()

        return asyncio.run(main())

    def cancel(self) -> None:
        self._cancelled = True
        loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)


class SessionLoop:
    """An event loop on its own thread, for work that lives across several user actions.

    Environment code (tools, rewards) may block; on this thread it never freezes the interface.
    ``submit(coro)`` runs a coroutine on the loop; ``await run(coro)`` (in an ``@work`` worker) waits for it
    without blocking the UI; ``stop()`` ends the thread."""

    def __init__(self, name: str = "workbench-session") -> None:
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

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """``coro``'s result, awaited from the UI loop (an ``@work`` worker)."""
        return await asyncio.wrap_future(self.submit(coro))

    def stop(self, timeout: float = 10.0) -> None:
        if self.alive:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
