"""What a command runs over an environment: evaluation, validation and the turn-by-turn debugger."""
