ALTER TABLE rollout ADD COLUMN source VARCHAR NOT NULL DEFAULT 'model';
CREATE INDEX ix_rollout_source ON rollout (source);
