from envs.coding.tasks.median.repo.stats.central import mean, median

__all__ = ["mean", "median"]
