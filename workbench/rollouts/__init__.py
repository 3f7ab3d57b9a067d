"""Running rollouts: the engine, the model client, the interception proxy and token-exact traces."""
