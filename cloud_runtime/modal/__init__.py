"""The Modal backend: the app, its image, vLLM inference, the clustered trainer and the orchestrator."""
