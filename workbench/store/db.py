"""Opening a store: file checks, pragmas, migrations."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from workbench.errors import StoreError, StoreFieldError
from workbench.store.migrations import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, create_schema

#: The field that names the store file: ``--db`` on the command line, the store the app opens.
DB = "Store.db"
NOT_A_STORE = "{value} is not a Workbench store ({why}); pass another {field} or remove the file"


class StoreReadOnlyError(StoreFieldError):
    """The store is a valid Workbench store this process cannot write (permissions, the immutable flag,
    a read-only mount): the commands that only read open it read-only instead."""


def file_kind(p: Path) -> str:
    """What ``p`` is, as a store check says it: ``missing``, ``file``, or the kind of what is not a file
    (a device, a FIFO, a socket: SQLite would read or block on it, or treat ``/dev/null`` as empty)."""
    import stat

    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "file"  # unreadable: opening it says why
    if stat.S_ISREG(mode):
        return "file"
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def _read_only(p: Path, why: str) -> StoreReadOnlyError:
    return StoreReadOnlyError(DB, p, template="{value} is read-only ({why}): the commands that only read it (runs, "
                              "show, export, the app's Traces) still open it; to write to it, make it writable (its "
                              "permissions, `chattr -i`, or the mount) or pass another {field}", why=why)


def _refused(p: Path, template: str, **values: Any) -> StoreFieldError:
    """The store file named by the ``db`` field (``--db``, the app's store) cannot be used."""
    return StoreFieldError(DB, p, template=template, **values)


def _write_probe(conn: sqlite3.Connection) -> str | None:
    """Why the store cannot be written, or None: a header write in a transaction that is rolled back
    (SQLite opens a file it cannot write read-only without saying so)."""
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(f"PRAGMA user_version={version}")
        finally:
            conn.execute("ROLLBACK")
    except sqlite3.OperationalError as e:
        text = str(e)
        if "readonly" in text or "read-only" in text or "unable to open" in text or "disk I/O" in text:
            return text
        raise
    return None


def on_read_only_medium(path: Path) -> bool:
    """Whether ``path``'s folder is on a read-only file system (where SQLite cannot make the WAL's
    shared-memory file, so a reader must open the store as immutable)."""
    try:
        return bool(os.statvfs(path.parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _ro_uri(p: Path) -> str:
    return f"file:{p}?immutable=1" if on_read_only_medium(p) else f"file:{p}?mode=ro"


def connect(path: Path | str, *, readonly: bool = False) -> sqlite3.Connection:
    """A connection with the store's pragmas (WAL, NORMAL sync, busy timeout)."""
    uri = _ro_uri(Path(path)) if readonly else f"file:{Path(path)}"
    conn = sqlite3.connect(uri, uri=True, timeout=30.0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=30000")
    if not readonly:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute("PRAGMA cache_size=-65536")
    conn.execute("PRAGMA temp_store=MEMORY")
    conn.execute("PRAGMA mmap_size=268435456")
    return conn


def open_store_file(path: Path | str, *, readonly: bool = False) -> Path:
    """Create or migrate the store at ``path`` (``readonly``: only check it); refuse files that are not
    Workbench stores, and say so when a valid one cannot be written (:class:`StoreReadOnlyError`)."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise _refused(p, "{field} {value} is a directory; give a file path such as {example}",
                       example=p / "workbench.db")
    kind = file_kind(p)
    if kind not in ("missing", "file"):
        raise _refused(p, "{field} {value} is {kind}, not a store file; give the path of a store file", kind=kind)
    existed = p.exists()
    if readonly and not existed:
        raise _refused(p, "no store at {value}; pass the {field} of an existing store")
    if not existed:
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create the store's directory {p.parent}: {e.strerror}") from None
    try:
        # A plain connection for the checks: a file we refuse must be left exactly as it was (no WAL switch).
        medium_ro = existed and on_read_only_medium(p)
        uri = _ro_uri(p) if readonly or medium_ro else f"file:{p}"
        conn = sqlite3.connect(uri, uri=True, timeout=30.0, isolation_level=None)
        conn.execute("PRAGMA busy_timeout=30000")
    except sqlite3.OperationalError as e:
        if not existed:
            raise _refused(p, "cannot create the store {value} ({why}): its folder is not writable; pass another "
                           "{field}", why=e) from None
        raise _refused(p, "cannot open {value} ({why}); check its permissions or pass another {field}", why=e) from None
    except sqlite3.DatabaseError as e:
        raise _refused(p, NOT_A_STORE, why=e) from None
    try:
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        except sqlite3.DatabaseError as e:
            raise _refused(p, NOT_A_STORE, why=e) from None
        if app_id != APPLICATION_ID and tables:
            shown = ", ".join(tables[:4])
            raise _refused(p, "{value} is a SQLite file but not a Workbench store (it has tables: {shown}); pass "
                           "another {field}", shown=shown)
        if version > SCHEMA_VERSION:
            raise _refused(p, "{value} was written by a newer Workbench (store schema v{version}; this version reads "
                           "up to v{latest}); upgrade rl-workbench or pass another {field}", version=version,
                           latest=SCHEMA_VERSION)
        if readonly:
            if version < SCHEMA_VERSION:
                raise StoreError(f"{p} is an older store (schema v{version}) that is read-only here: it must be "
                                 "upgraded once, writably, before this version can read it")
            return p
        if medium_ro:
            raise _read_only(p, "it is on a read-only file system")
        if existed and (why := _write_probe(conn)) is not None:
            raise _read_only(p, why)
        conn.execute("PRAGMA journal_mode=WAL")
        if app_id != APPLICATION_ID:
            conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        if version < SCHEMA_VERSION:
            _migrate(conn, version)
    finally:
        conn.close()
    return p


def _migrate(conn: sqlite3.Connection, start: int) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have migrated while we waited for the lock.
        current = conn.execute("PRAGMA user_version").fetchone()[0]
        if current == 0:  # a new store: the current schema, as the models declare it
            create_schema(conn)
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        for i in range(current or SCHEMA_VERSION, SCHEMA_VERSION):
            MIGRATIONS[i](conn)
            conn.execute(f"PRAGMA user_version={i + 1}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
