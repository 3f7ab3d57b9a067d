"""Reading stored runs: reports, reward statistics, token reports, rollout diffs and re-scoring."""
