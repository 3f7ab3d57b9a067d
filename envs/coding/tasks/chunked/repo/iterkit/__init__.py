from envs.coding.tasks.chunked.repo.iterkit.chunks import chunked

__all__ = ["chunked"]
