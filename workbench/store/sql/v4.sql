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
