"""The SQLite store: environments, runs, rollouts, scores, model calls, errors, costs, prices."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import orjson

from workbench.config.redact import redact, redact_url
from workbench.errors import NotFoundError
from workbench.store.db import StoreReadOnlyError, connect, open_store_file
from workbench.store.migrations import SCHEMA_VERSION
from workbench.store.prices import DEFAULT_PRICES, DEFAULT_SOURCE, Price
from workbench.store.run_kinds import check_kind
from workbench.store.writer import BatchWriter, RolloutRecord, dumps

__all__ = ["Store", "BatchWriter", "RolloutRecord", "SCHEMA_VERSION", "StoreReadOnlyError", "dumps"]


#: Column defaults of ``run`` (mirrors schema.RunRow; a test keeps them equal). Kept here so that
#: opening a store does not import SQLModel/SQLAlchemy: ``workbench eval`` starts in a fraction of a second.
RUN_DEFAULTS: dict[str, Any] = {
    "kind": "eval", "env_name": "", "env_version": "", "env_source": "", "env_args": "{}", "model": "",
    "base_url": "", "harness": "", "runtime": "", "n_tasks": 0, "rollouts_per_task": 1, "concurrency": 1,
    "sampling": "{}", "config": "{}", "status": "running", "error": "", "created_at": 0.0, "finished_at": None,
    "summary": "{}",
}


class Store:
    """A handle on one store file. Cheap control operations go through ``self.conn``; rollouts go
    through a :class:`BatchWriter` (``writer()``), which commits them from its own process."""

    def __init__(self, path: Path | str, *, readonly: bool = False) -> None:
        """``readonly``: open an existing store for reading only (nothing is created, migrated or seeded)."""
        self.path = open_store_file(path, readonly=readonly)
        self.readonly = readonly
        self.conn = connect(self.path, readonly=readonly)
        self.conn.row_factory = sqlite3.Row
        if not readonly:
            self._seed_prices()

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def writer(self, **kw: Any) -> BatchWriter:
        return BatchWriter(self.path, **kw)

    # -- environments --------------------------------------------------------------------------
    def register_env(self, name: str, version: str, source: str, description: str = "") -> None:
        now = time.time()
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute("INSERT OR IGNORE INTO environment (name, source, description, created_at) VALUES (?, ?, ?, ?)",
                      (name, source, description, now))
            c.execute("UPDATE environment SET source=?, description=? WHERE name=?", (source, description, name))
            env_id = c.execute("SELECT id FROM environment WHERE name=?", (name,)).fetchone()[0]
            if not c.execute("SELECT 1 FROM env_version WHERE env_id=? AND hash=?", (env_id, version)).fetchone():
                c.execute("INSERT INTO env_version (env_id, hash, source, created_at) VALUES (?, ?, ?, ?)",
                          (env_id, version, source, now))
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    # -- runs ----------------------------------------------------------------------------------
    def create_run(self, run_id: str, **fields: Any) -> None:
        if isinstance(fields.get("base_url"), str):  # a URL is stored without its credentials
            fields["base_url"] = redact_url(fields["base_url"])
        if isinstance(fields.get("config"), dict) and isinstance(fields["config"].get("base_url"), str):
            fields["config"] = {**fields["config"], "base_url": redact_url(fields["config"]["base_url"])}
        fields = {k: (dumps(v) if isinstance(v, dict | list) else v) for k, v in fields.items()}
        fields.setdefault("created_at", time.time())
        check_kind(fields.get("kind", RUN_DEFAULTS.get("kind", "eval")))
        unknown = set(fields) - set(RUN_DEFAULTS)
        if unknown:
            raise TypeError(f"unknown run fields: {sorted(unknown)}")
        row = {"id": run_id, **RUN_DEFAULTS, **fields}
        cols = ", ".join(row)
        marks = ", ".join("?" * len(row))
        self.conn.execute(f"INSERT INTO run ({cols}) VALUES ({marks})", tuple(row.values()))

    def update_run(self, run_id: str, **fields: Any) -> None:
        if isinstance(fields.get("error"), str):
            fields["error"] = redact(fields["error"])
        fields = {k: (dumps(v) if isinstance(v, dict | list) else v) for k, v in fields.items()}
        sets = ", ".join(f"{k}=?" for k in fields)
        self.conn.execute(f"UPDATE run SET {sets} WHERE id=?", (*fields.values(), run_id))

    def delete_run(self, run_id: str) -> None:
        """Remove a run that holds no rollout (a debug session stopped before its rollout finished), with
        its cost events and training records."""
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            if c.execute("SELECT 1 FROM rollout WHERE run_id=? LIMIT 1", (run_id,)).fetchone():
                raise ValueError(f"run {run_id} holds rollouts; it is never deleted")
            for table in ("cost_event", "train_metric"):
                c.execute(f"DELETE FROM {table} WHERE run_id=?", (run_id,))
            c.execute("DELETE FROM run WHERE id=?", (run_id,))
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    def get_run(self, run_id: str) -> dict[str, Any]:
        row = self.conn.execute("SELECT * FROM run WHERE id=?", (run_id,)).fetchone()
        if row is None:
            like = self.conn.execute("SELECT id FROM run WHERE id LIKE ? ORDER BY created_at DESC LIMIT 2",
                                     (run_id + "%",)).fetchall()
            if len(like) == 1:
                return self.get_run(like[0][0])
            raise NotFoundError(f"no run {run_id!r} in {self.path}; `workbench runs` lists them")
        d = dict(row)
        for k in ("env_args", "sampling", "config", "summary"):
            d[k] = orjson.loads(d[k] or "{}")
        return d

    def done_slots(self, run_id: str) -> set[tuple[int, int]]:
        return {(r[0], r[1]) for r in self.conn.execute(
            "SELECT task_index, sample_index FROM rollout WHERE run_id=?", (run_id,))}

    # -- training ------------------------------------------------------------------------------
    def record_train(self, run_id: str, step: int, kind: str, metrics: dict[str, Any] | None = None,
                     message: str = "") -> None:
        """One training record: kind ``step`` | ``skipped`` | ``eval`` | ``event``."""
        self.conn.execute("INSERT INTO train_metric (run_id, step, kind, metrics, message, created_at) "
                          "VALUES (?, ?, ?, ?, ?, ?)", (run_id, step, kind, dumps(metrics or {}), message, time.time()))

    def train_records(self, run_id: str, kind: str | None = None, after_id: int = 0) -> list[dict[str, Any]]:
        """The run's training records in order (of one ``kind``), newer than ``after_id``."""
        sql = "SELECT id, step, kind, metrics, message, created_at FROM train_metric WHERE run_id=? AND id>?"
        args: list[Any] = [run_id, after_id]
        if kind:
            sql += " AND kind=?"
            args.append(kind)
        rows = self.conn.execute(sql + " ORDER BY id", args).fetchall()
        return [{"id": r[0], "step": r[1], "kind": r[2], "metrics": orjson.loads(r[3]), "message": r[4],
                 "created_at": r[5]} for r in rows]

    # -- prices --------------------------------------------------------------------------------
    def _seed_prices(self) -> None:
        if self.conn.execute("SELECT 1 FROM meta WHERE key='prices_seeded'").fetchone():
            return
        now = time.time()
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            if not self.conn.execute("SELECT 1 FROM meta WHERE key='prices_seeded'").fetchone():
                self.conn.executemany(
                    "INSERT OR IGNORE INTO model_price (model, provider, input_usd_per_mtok, output_usd_per_mtok, "
                    "source, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                    [(m, p, i, o, DEFAULT_SOURCE, now) for m, (p, i, o) in DEFAULT_PRICES.items()])
                self.conn.execute("INSERT INTO meta (key, value) VALUES ('prices_seeded', '1')")
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def prices(self) -> dict[str, Price]:
        return {r["model"]: Price(r["model"], r["provider"], r["input_usd_per_mtok"], r["output_usd_per_mtok"],
                                  r["source"])
                for r in self.conn.execute("SELECT * FROM model_price ORDER BY model")}

    def set_price(self, model: str, input_usd_per_mtok: float, output_usd_per_mtok: float, provider: str = "",
                  source: str = "set by user") -> None:
        self.conn.execute(
            "INSERT INTO model_price (model, provider, input_usd_per_mtok, output_usd_per_mtok, source, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(model) DO UPDATE SET provider=excluded.provider, "
            "input_usd_per_mtok=excluded.input_usd_per_mtok, output_usd_per_mtok=excluded.output_usd_per_mtok, "
            "source=excluded.source, updated_at=excluded.updated_at",
            (model, provider, input_usd_per_mtok, output_usd_per_mtok, source, time.time()))

    def delete_price(self, model: str) -> bool:
        return self.conn.execute("DELETE FROM model_price WHERE model=?", (model,)).rowcount > 0
