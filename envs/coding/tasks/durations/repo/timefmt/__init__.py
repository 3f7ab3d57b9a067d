from envs.coding.tasks.durations.repo.timefmt.duration import parse_duration

__all__ = ["parse_duration"]
