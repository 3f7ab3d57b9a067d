CREATE TABLE rescore (
	id INTEGER NOT NULL,
	env_name VARCHAR NOT NULL,
	env_version VARCHAR NOT NULL,
	run_id VARCHAR,
	status VARCHAR NOT NULL,
	rollouts INTEGER NOT NULL,
	changed INTEGER NOT NULL,
	created_at FLOAT NOT NULL,
	finished_at FLOAT,
	summary VARCHAR NOT NULL,
	PRIMARY KEY (id)
);
CREATE INDEX ix_rescore_env ON rescore (env_name, created_at);
CREATE TABLE rescore_rollout (
	rescore_id INTEGER NOT NULL,
	rollout_pk INTEGER NOT NULL,
	reward FLOAT NOT NULL,
	scores VARCHAR NOT NULL,
	errors VARCHAR,
	PRIMARY KEY (rescore_id, rollout_pk),
	FOREIGN KEY(rescore_id) REFERENCES rescore (id)
) WITHOUT ROWID;
CREATE INDEX ix_rescore_rollout_pk ON rescore_rollout (rollout_pk, rescore_id);
