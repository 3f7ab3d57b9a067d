"""Sandboxes on this machine: bubblewrap processes and Docker containers, each driven by an exec agent."""
