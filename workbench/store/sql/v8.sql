CREATE INDEX ix_run_kind_created ON run (kind, created_at);
