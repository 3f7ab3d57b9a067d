"""Write ``workbench/store/sql/schema.sql``, the DDL a new store is created with, from the SQLModel
declarations in ``workbench/store/schema.py`` (run it after changing a model, with the migration that
takes older stores to the same schema; ``tests/store/test_schema.py`` fails while the file is stale).

    python scripts/gen_schema_sql.py
"""

from __future__ import annotations

from workbench.fsutil import atomic_write
from workbench.store.migrations import SCHEMA_SQL
from workbench.store.schema import schema_sql


def main() -> None:
    atomic_write(SCHEMA_SQL, schema_sql())
    print(f"wrote {SCHEMA_SQL}")


if __name__ == "__main__":
    main()
