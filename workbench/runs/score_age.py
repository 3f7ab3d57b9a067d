"""How old a stored score is: the version of the environment (its files' content hash, ``EnvRef.version``)
a rollout was scored with, against the version its files have now.

A rollout's stored reward is the one its run computed, with the run's ``env_version``; an applied re-score
(``workbench rescore --apply``) records new scores beside it, tied to the version it ran with. The
Environments and Traces screens both ask here, so they say the same thing about the same rollout: its score
is current, or it is older than the rubric (and whether a re-score with today's rubric is stored).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from workbench.authoring.discovery import EnvRef
from workbench.errors import WorkbenchError
from workbench.store.rescores import rescored_scores
from workbench.store.score_versions import (
    rollout_scored_version,
    run_scored_versions,
    scored_with_other_versions,
)


@dataclass(frozen=True, slots=True)
class ScoreAge:
    """What a stored score was computed with, beside what the environment is now."""

    env: str
    scored_with: str  # the run's env_version: the files the stored reward was computed with
    current: str | None  # the version the environment's files have now (None: not known here)
    rescored_with: str | None = None  # the version of the newest completed re-score of it, if any

    @property
    def stale(self) -> bool:
        """The stored score is of other files than the environment has now."""
        return self.current is not None and self.scored_with != self.current

    @property
    def rescored_now(self) -> bool:
        """A re-score with the environment as it is now is stored beside the old score."""
        return self.current is not None and self.rescored_with == self.current

    def describe(self) -> str:
        """One line for a screen ("" when the score is current)."""
        if not self.stale:
            return ""
        then = f"scored with {self.env} {self.scored_with}; its files are now {self.current}"
        if self.rescored_now:
            return then + " (a re-score with them is stored)"
        return then + f": an older rubric's score (R on Environments, or `workbench rescore {self.env}`, re-scores it)"


def current_versions(refs: Iterable[EnvRef]) -> dict[str, str]:
    """Environment name -> the version its files have now, for each of ``refs`` whose files can be read."""
    out: dict[str, str] = {}
    for ref in refs:
        try:
            out.setdefault(ref.name, ref.version())
        except (OSError, WorkbenchError):
            continue
    return out


def rollout_score_age(conn: sqlite3.Connection, rollout_id: str, current: Mapping[str, str]) -> ScoreAge | None:
    """The age of the stored score of rollout ``rollout_id`` (None when no such rollout is stored);
    ``current``: environment name -> its version now (:func:`current_versions`)."""
    found = rollout_scored_version(conn, rollout_id)
    if found is None:
        return None
    pk, env, scored_with = found
    rescored = rescored_scores(conn, pk)
    return ScoreAge(env, scored_with, current.get(env), rescored["env_version"] if rescored else None)


def run_score_ages(conn: sqlite3.Connection, run_ids: Iterable[str], current: Mapping[str, str]) -> dict[str, ScoreAge]:
    """Run id -> the age of its rollouts' stored scores (a run scores every rollout with one version); a
    table of rollouts asks once per run shown, not per row. Unknown runs are left out."""
    return {run_id: ScoreAge(env, scored_with, current.get(env))
            for run_id, (env, scored_with) in run_scored_versions(conn, run_ids).items()}


def stale_stored(conn: sqlite3.Connection, env: str, current: str) -> tuple[int, int]:
    """(stored rollouts of ``env`` scored with another version than ``current``, all its stored rollouts)."""
    return scored_with_other_versions(conn, env, current)


def describe_stale(env: str, stale: int, total: int) -> str:
    """One line on :func:`stale_stored`'s count ("" when every stored score is current)."""
    if not stale:
        return ""
    return (f"{stale:,} of {total:,} stored rollouts of {env} were scored with an older rubric (other files than "
            "now): their stored rewards are not what it gives today")


__all__ = ["ScoreAge", "current_versions", "describe_stale", "rollout_score_age", "run_score_ages", "stale_stored"]
