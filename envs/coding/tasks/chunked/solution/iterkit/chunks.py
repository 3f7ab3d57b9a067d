"""Split sequences into pieces."""


def chunked(items, size):
    """Split ``items`` into lists of ``size`` items (the last one may be shorter)."""
    if size < 1:
        raise ValueError("size must be at least 1")
    items = list(items)
    return [items[start:start + size] for start in range(0, len(items), size)]
