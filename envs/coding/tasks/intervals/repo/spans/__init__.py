from envs.coding.tasks.intervals.repo.spans.merge import merge

__all__ = ["merge"]
