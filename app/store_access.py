"""Store access for the TUI: one connection per worker thread (SQLite connections are not shared)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from workbench.store import Store, StoreReadOnlyError

if TYPE_CHECKING:
    from textual.message import Message
    from textual.message_pump import MessagePump

T = TypeVar("T")


def call_ui(app: Any, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Run ``fn`` on the app's thread from a worker thread; a no-op once the app has stopped."""
    try:
        app.call_from_thread(fn, *args, **kwargs)
    except RuntimeError:  # the app (or its loop) is gone: nobody to show it to
        pass


def post_ui(target: MessagePump, message: Message) -> None:
    """Post ``message`` to ``target`` (a screen or widget) from a worker thread: ``post_message`` is
    thread-safe; a no-op once the app (or its loop) has stopped, as :func:`call_ui` is."""
    try:
        target.post_message(message)
    except RuntimeError:  # the loop is closed: nobody to tell
        pass


class StoreHandle:
    """Hands each thread its own :class:`Store` on the same file; closes them at the end.

    A store this process cannot write (permissions, the immutable flag, a read-only mount) opens
    read-only: :attr:`readonly` is then True and :attr:`readonly_reason` says why; everything that
    only reads works, and what would write is refused by the screens (``WorkbenchApp.require_writable``).

    A store whose thread is still running (a worker mid-query when the app quits) is not closed under
    it, which would crash the process inside SQLite: it closes with its thread, whose thread-local
    storage is freed when the thread ends."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.readonly = False
        self.readonly_reason = ""
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[tuple[threading.Thread, Store]] = []
        # Create / migrate the file now, so a bad --db fails before the app starts; a store that
        # cannot be written is decided here, once, for every thread.
        try:
            store = Store(self.path)
        except StoreReadOnlyError as e:
            self.readonly, self.readonly_reason = True, str(e)
            store = Store(self.path, readonly=True)
        self._keep(store)

    def get(self) -> Store:
        store: Store | None = getattr(self._local, "store", None)
        if store is None:
            store = self._keep(Store(self.path, readonly=self.readonly))
        return store

    def _keep(self, store: Store) -> Store:
        """``store`` as this thread's, closed with the others."""
        self._local.store = store
        with self._lock:
            self._all.append((threading.current_thread(), store))
        return store

    def close(self) -> None:
        with self._lock:
            stores, self._all = self._all, []
        me = threading.current_thread()
        for thread, s in stores:
            if thread is not me and thread.is_alive():
                continue
            try:
                s.close()
            except Exception:
                pass


class AsyncRunner:
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
