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
