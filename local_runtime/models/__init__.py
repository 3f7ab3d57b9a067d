"""Models on this machine: loading, the tiny embedded model and its corpus, chat templates, LoRA."""
