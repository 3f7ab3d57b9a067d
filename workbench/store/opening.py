"""Which store a job opens, and how: ``--db``/``WORKBENCH_DB`` or Workbench's own default store.

The command line (``workbench.cli.common.open_store``) and the Python API (``wb.eval``, ``wb.compare``)
open their store here.
"""

from __future__ import annotations

import os
from pathlib import Path

from workbench.store import Store, StoreReadOnlyError


def open_store(db: str | Path | None = None, *, read_only_ok: bool = False, existing: bool = False) -> Store:
    """The store at ``db`` (else ``$WORKBENCH_DB``, else the default store, created on first use).

    ``read_only_ok`` (jobs that only read): a store this process cannot write is opened read-only instead
    of refused. ``existing``: a named store that is not there is refused, not created (nothing to read
    means a wrong path)."""
    from workbench.config.paths import default_db
    from workbench.errors import StoreFieldError
    from workbench.store.db import DB

    named = db or os.environ.get("WORKBENCH_DB") or None
    path = named or default_db()
    if existing and named and not os.path.lexists(Path(path).expanduser()):
        raise StoreFieldError(DB, path, template="no store at {value}: nothing has been stored there (the first "
                              "`workbench eval` creates it); pass the {field} of an existing store")
    try:
        return Store(path)
    except StoreReadOnlyError:
        if not read_only_ok:
            raise
        return Store(path, readonly=True)


__all__ = ["open_store"]
