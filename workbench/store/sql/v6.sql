CREATE INDEX ix_rollout_env_reward ON rollout (env_name, reward);
