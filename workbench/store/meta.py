"""The store's ``meta`` table (key → text: cursors of streamed logs, one-time markers) and the write
transaction the code that keeps such a cursor uses."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator


def read_meta(conn: sqlite3.Connection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def write_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                 (key, value))


@contextlib.contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction (``BEGIN IMMEDIATE``) on an autocommit connection: committed when the block
    ends, rolled back when it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


__all__ = ["immediate", "read_meta", "write_meta"]
