"""Closed intervals (start, end) with start <= end."""


def merge(intervals):
    """Merge overlapping or touching intervals; the result is sorted by start."""
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out
