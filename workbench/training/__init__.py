"""RL in the domain: algorithms (rollouts to advantages), the run configuration, the async loop and its roles."""
