CREATE INDEX ix_rollout_duration ON rollout (duration_s);
CREATE INDEX ix_rollout_env ON rollout (env_name);
DROP INDEX ix_rollout_env_created;
DROP INDEX ix_score_name;
