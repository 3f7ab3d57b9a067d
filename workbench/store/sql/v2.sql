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
