"""What one rollout reads and writes: its task, the live rollout record, its trace, its conversations,
the model's replies and a program's mounts. Below authoring, rollouts and the store, which all use them."""
