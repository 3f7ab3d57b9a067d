"""The local trainer: losses, packing, checkpoints, the trainer worker process and the local roles."""
