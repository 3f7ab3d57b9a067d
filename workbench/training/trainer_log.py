"""What a failed trainer's log says about the failure.

A trainer of several ranks runs under ``torchrun``, whose agent ends the log with its own report: its
traceback, then a ``ChildFailedError`` block naming the rank that failed first and its exit code. The
rank's own words (its traceback, gloo's or NCCL's message) come before that report, so the lines worth
showing are the end of the log before the report, then the report's root cause.
"""

from __future__ import annotations

import re

#: The agent's own log lines (``W1205 06:27:35.17 1496 torch/distributed/elastic/...] Sending process ...``).
AGENT_LOG_LINE = re.compile(r"^[DIWEF]\d{4} [\d:.]+ +\d+ \S*torch/distributed/elastic/")
AGENT_ERROR = "ChildFailedError"
ROOT_CAUSE_FIELDS = ("rank", "exitcode", "traceback")


def failure_lines(text: str, keep: int = 12) -> list[str]:
    """The last ``keep`` lines of the log before ``torchrun``'s report, then the report's root cause
    (the rank, its exit code and signal); the log's last ``keep`` lines when there is no such report."""
    lines = text.strip().splitlines()
    agent = next((i for i, ln in enumerate(lines) if AGENT_ERROR in ln), None)
    if agent is None:
        return lines[-keep:]
    start = next((i for i in range(agent, -1, -1) if lines[i].startswith("Traceback (most recent call last)")), agent)
    cause: list[str] = []
    if (root := next((i for i in range(agent, len(lines)) if lines[i].startswith("Root Cause")), None)) is not None:
        cause = [ln.strip() for ln in lines[root + 1:]
                 if ln.strip().split(":", 1)[0].strip() in ROOT_CAUSE_FIELDS][:len(ROOT_CAUSE_FIELDS)]
    before = [ln for ln in lines[:start] if not AGENT_LOG_LINE.match(ln)][-keep:]
    return [*before, *(["torchrun: the first rank that failed: " + "; ".join(cause)] if cause else [])]


__all__ = ["failure_lines"]
