from envs.coding.tasks.slugify.repo.textkit.slug import slugify

__all__ = ["slugify"]
