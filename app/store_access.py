"""Store access for the TUI: one connection per worker thread (SQLite connections are not shared)."""

from __future__ import annotations

import threading
from pathlib import Path

from workbench.store import Store, StoreReadOnlyError


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
