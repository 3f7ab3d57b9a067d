CREATE TABLE cost_event (
	id INTEGER NOT NULL, 
	run_id VARCHAR, 
	kind VARCHAR NOT NULL, 
	provider VARCHAR NOT NULL, 
	model VARCHAR NOT NULL, 
	quantity FLOAT NOT NULL, 
	unit VARCHAR NOT NULL, 
	usd FLOAT NOT NULL, 
	created_at FLOAT NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_cost_event_created_at ON cost_event (created_at);
CREATE INDEX ix_cost_event_run_id ON cost_event (run_id);
CREATE TABLE environment (
	id INTEGER NOT NULL, 
	name VARCHAR NOT NULL, 
	source VARCHAR NOT NULL, 
	description VARCHAR NOT NULL, 
	created_at FLOAT NOT NULL, 
	PRIMARY KEY (id)
);
CREATE UNIQUE INDEX ix_environment_name ON environment (name);
CREATE TABLE feedback (
	id INTEGER NOT NULL, 
	response_id VARCHAR, 
	session VARCHAR, 
	app VARCHAR NOT NULL, 
	score FLOAT, 
	label VARCHAR NOT NULL, 
	comment VARCHAR NOT NULL, 
	created_at FLOAT NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_feedback_response ON feedback (response_id);
CREATE INDEX ix_feedback_session ON feedback (session);
CREATE TABLE meta (
	"key" VARCHAR NOT NULL, 
	value VARCHAR NOT NULL, 
	PRIMARY KEY ("key")
);
CREATE TABLE model_call (
	id INTEGER NOT NULL, 
	rollout_pk INTEGER NOT NULL, 
	idx INTEGER NOT NULL, 
	n_messages INTEGER NOT NULL, 
	finish_reason VARCHAR, 
	prompt_tokens INTEGER NOT NULL, 
	completion_tokens INTEGER NOT NULL, 
	latency_ms FLOAT NOT NULL, 
	extra VARCHAR, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_model_call_rollout_pk ON model_call (rollout_pk);
CREATE TABLE model_price (
	model VARCHAR NOT NULL, 
	provider VARCHAR NOT NULL, 
	input_usd_per_mtok FLOAT NOT NULL, 
	output_usd_per_mtok FLOAT NOT NULL, 
	source VARCHAR NOT NULL, 
	updated_at FLOAT NOT NULL, 
	PRIMARY KEY (model)
);
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
CREATE TABLE rollout_error (
	id INTEGER NOT NULL, 
	rollout_pk INTEGER NOT NULL, 
	run_id VARCHAR NOT NULL, 
	kind VARCHAR NOT NULL, 
	source VARCHAR NOT NULL, 
	message VARCHAR NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_rollout_error_rollout_pk ON rollout_error (rollout_pk);
CREATE INDEX ix_rollout_error_run_id ON rollout_error (run_id);
CREATE TABLE run (
	id VARCHAR NOT NULL, 
	kind VARCHAR NOT NULL, 
	env_name VARCHAR NOT NULL, 
	env_version VARCHAR NOT NULL, 
	env_source VARCHAR NOT NULL, 
	env_args VARCHAR NOT NULL, 
	model VARCHAR NOT NULL, 
	base_url VARCHAR NOT NULL, 
	harness VARCHAR NOT NULL, 
	runtime VARCHAR NOT NULL, 
	n_tasks INTEGER NOT NULL, 
	rollouts_per_task INTEGER NOT NULL, 
	concurrency INTEGER NOT NULL, 
	sampling VARCHAR NOT NULL, 
	config VARCHAR NOT NULL, 
	status VARCHAR NOT NULL, 
	error VARCHAR NOT NULL, 
	created_at FLOAT NOT NULL, 
	finished_at FLOAT, 
	summary VARCHAR NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_run_created_at ON run (created_at);
CREATE INDEX ix_run_env_name ON run (env_name);
CREATE INDEX ix_run_kind_created ON run (kind, created_at);
CREATE TABLE score (
	id INTEGER NOT NULL, 
	rollout_pk INTEGER NOT NULL, 
	name VARCHAR NOT NULL, 
	kind VARCHAR NOT NULL, 
	value FLOAT NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_score_rollout_pk ON score (rollout_pk);
CREATE TABLE trace (
	rollout_pk INTEGER NOT NULL, 
	nodes BLOB NOT NULL, 
	token_ids BLOB NOT NULL, 
	logprobs BLOB NOT NULL, 
	mask BLOB NOT NULL, 
	n_tokens INTEGER NOT NULL, 
	mismatches INTEGER NOT NULL, 
	PRIMARY KEY (rollout_pk)
);
CREATE TABLE env_version (
	id INTEGER NOT NULL, 
	env_id INTEGER NOT NULL, 
	hash VARCHAR NOT NULL, 
	source VARCHAR NOT NULL, 
	created_at FLOAT NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(env_id) REFERENCES environment (id)
);
CREATE INDEX ix_env_version_env_id ON env_version (env_id);
CREATE INDEX ix_env_version_hash ON env_version (hash);
CREATE TABLE rescore_rollout (
	rescore_id INTEGER NOT NULL, 
	rollout_pk INTEGER NOT NULL, 
	reward FLOAT NOT NULL, 
	scores VARCHAR NOT NULL, 
	errors VARCHAR, 
	PRIMARY KEY (rescore_id, rollout_pk), 
	FOREIGN KEY(rescore_id) REFERENCES rescore (id)
)
 WITHOUT ROWID;
CREATE INDEX ix_rescore_rollout_pk ON rescore_rollout (rollout_pk, rescore_id);
CREATE TABLE rollout (
	pk INTEGER NOT NULL, 
	id VARCHAR NOT NULL, 
	run_id VARCHAR NOT NULL, 
	env_name VARCHAR NOT NULL, 
	model VARCHAR NOT NULL, 
	task_id VARCHAR NOT NULL, 
	task_index INTEGER NOT NULL, 
	sample_index INTEGER NOT NULL, 
	status VARCHAR NOT NULL, 
	error_kind VARCHAR, 
	reward FLOAT, 
	prompt_tokens INTEGER NOT NULL, 
	completion_tokens INTEGER NOT NULL, 
	cost_usd FLOAT NOT NULL, 
	duration_s FLOAT NOT NULL, 
	turns INTEGER NOT NULL, 
	created_at FLOAT NOT NULL, 
	prompt VARCHAR NOT NULL, 
	answer VARCHAR NOT NULL, 
	info VARCHAR NOT NULL, 
	completion VARCHAR NOT NULL, 
	messages VARCHAR NOT NULL, 
	state VARCHAR NOT NULL, 
	source VARCHAR DEFAULT 'model' NOT NULL, 
	PRIMARY KEY (pk), 
	UNIQUE (id), 
	FOREIGN KEY(run_id) REFERENCES run (id)
);
CREATE INDEX ix_rollout_duration ON rollout (duration_s);
CREATE INDEX ix_rollout_env ON rollout (env_name);
CREATE INDEX ix_rollout_env_reward ON rollout (env_name, reward);
CREATE INDEX ix_rollout_error_kind ON rollout (error_kind) WHERE error_kind IS NOT NULL;
CREATE INDEX ix_rollout_model ON rollout (model);
CREATE INDEX ix_rollout_reward ON rollout (reward);
CREATE INDEX ix_rollout_run_reward ON rollout (run_id, reward);
CREATE UNIQUE INDEX ix_rollout_slot ON rollout (run_id, task_index, sample_index);
CREATE INDEX ix_rollout_source ON rollout (source);
CREATE TABLE train_metric (
	id INTEGER NOT NULL, 
	run_id VARCHAR NOT NULL, 
	step INTEGER NOT NULL, 
	kind VARCHAR NOT NULL, 
	metrics VARCHAR NOT NULL, 
	message VARCHAR NOT NULL, 
	created_at FLOAT NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(run_id) REFERENCES run (id)
);
CREATE INDEX ix_train_metric_run ON train_metric (run_id, kind, step);
CREATE VIRTUAL TABLE rollout_fts USING fts5(text, content='', tokenize='unicode61 remove_diacritics 2');
