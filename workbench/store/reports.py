"""What reports read of a stored run: its aggregates (``run_summary``), its rollouts' results per task
(``compare``), its scores per reward function (``probe``), the rollouts an optimisation reflects on,
the newest completed evals of an environment (the eval card), and its rollouts' token traces. The
figures are made in ``workbench/analysis`` and the commands; the SQL is here."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

_ERRORED = ("SELECT COUNT(*) FROM rollout WHERE run_id=? AND (status='error' OR pk IN "
            "(SELECT rollout_pk FROM rollout_error WHERE run_id=?))")


def rollout_totals(conn: sqlite3.Connection, run_id: str) -> tuple[Any, ...]:
    """``(rollouts, failed, mean reward, sum of squared rewards, scored, prompt tokens, completion tokens,
    cost, mean duration)`` of the run."""
    return conn.execute(
        """SELECT COUNT(*), SUM(status='error'), AVG(reward), SUM(reward*reward), COUNT(reward),
                  SUM(prompt_tokens), SUM(completion_tokens), SUM(cost_usd), AVG(duration_s)
           FROM rollout WHERE run_id=?""", (run_id,)).fetchone()


def errored_rollouts(conn: sqlite3.Connection, run_id: str) -> int:
    """How many of the run's rollouts failed or had any part raise (each counted once)."""
    return conn.execute(_ERRORED, (run_id, run_id)).fetchone()[0]


def score_means(conn: sqlite3.Connection, run_id: str) -> Iterator[tuple[str, str, float]]:
    """``(name, kind, mean)`` of each score the run's rollouts have, by name."""
    return conn.execute(
        """SELECT s.name, s.kind, AVG(s.value) FROM score s JOIN rollout r ON r.pk = s.rollout_pk
           WHERE r.run_id=? GROUP BY s.name, s.kind ORDER BY s.name""", (run_id,))


def error_kinds(conn: sqlite3.Connection, run_id: str) -> dict[str, int]:
    """How many errors of each kind the run recorded, most first."""
    return {k: c for k, c in conn.execute(
        "SELECT kind, COUNT(*) FROM rollout_error WHERE run_id=? GROUP BY kind ORDER BY 2 DESC", (run_id,))}


def top_failure(conn: sqlite3.Connection, run_id: str) -> tuple[str, str] | None:
    """``(kind, message)`` of the most frequent error among the run's failed rollouts, or None."""
    return conn.execute("SELECT kind, message FROM rollout_error e JOIN rollout r ON r.pk = e.rollout_pk "
                        "WHERE e.run_id=? AND r.status='error' GROUP BY e.kind ORDER BY COUNT(*) DESC LIMIT 1",
                        (run_id,)).fetchone()


def task_rewards(conn: sqlite3.Connection, run_id: str) -> Iterator[tuple[int, float | None]]:
    """``(task index, reward)`` of each of the run's rollouts."""
    return conn.execute("SELECT task_index, reward FROM rollout WHERE run_id=?", (run_id,))


def compared_run(conn: sqlite3.Connection, run_id: str) -> tuple[Any, ...] | None:
    """``(model, env_name, env_version, the model's registered name, the pipeline stage)`` of a run."""
    return conn.execute("SELECT model, env_name, env_version, json_extract(config, '$.model_name'), "
                        "json_extract(config, '$.pipeline.stage') FROM run WHERE id = ?", (run_id,)).fetchone()


def task_results(conn: sqlite3.Connection, run_id: str) -> Iterator[tuple[Any, ...]]:
    """``(task_id, reward, prompt tokens, completion tokens, cost, duration)`` of each of the run's rollouts."""
    return conn.execute("SELECT task_id, reward, prompt_tokens, completion_tokens, cost_usd, duration_s FROM rollout "
                        "WHERE run_id = ?", (run_id,))


def task_prompts(conn: sqlite3.Connection, run_id: str) -> Iterator[tuple[str, int, str]]:
    """``(task_id, task_index, prompt JSON)`` of each task of the run (its lowest task index's prompt)."""
    return conn.execute("SELECT task_id, MIN(task_index), prompt FROM rollout WHERE run_id = ? GROUP BY task_id",
                        (run_id,))


def reward_scores(conn: sqlite3.Connection, run_id: str) -> Iterator[tuple[str, float]]:
    """``(name, value)`` of every reward score (not a metric) of the run's rollouts."""
    return conn.execute("SELECT s.name, s.value FROM score s JOIN rollout r ON r.pk = s.rollout_pk WHERE r.run_id = ? "
                        "AND s.kind != 'metric'", (run_id,))


def reflected_rollouts(conn: sqlite3.Connection, run_id: str) -> list[dict[str, Any]]:
    """The run's rollouts as an optimisation reflects on them (``pk, task_index, reward, prompt, answer,
    completion, status, error_kind``), each with ``scores``: its scores as ``"name value"`` lines."""
    cur = conn.execute(
        "SELECT pk, task_index, reward, prompt, answer, completion, status, error_kind FROM rollout WHERE run_id=?",
        (run_id,))
    rows = [dict(zip([d[0] for d in cur.description], r, strict=True)) for r in cur.fetchall()]
    scores: dict[int, list[str]] = {}
    for pk, name, value in conn.execute(
            "SELECT rollout_pk, name, value FROM score WHERE rollout_pk IN "
            "(SELECT pk FROM rollout WHERE run_id=?) ORDER BY id", (run_id,)):
        scores.setdefault(pk, []).append(f"{name} {value:g}")
    for r in rows:
        r["scores"] = scores.get(r["pk"], [])
    return rows


def completed_evals(conn: sqlite3.Connection, env_name: str) -> list[tuple[Any, ...]]:
    """``(id, model, env_version, created_at, summary)`` of the environment's completed eval runs, newest first."""
    return conn.execute(
        "SELECT id, model, env_version, created_at, summary FROM run WHERE env_name = ? AND kind = 'eval' "
        "AND status = 'completed' ORDER BY created_at DESC", (env_name,)).fetchall()


def trace_row(conn: sqlite3.Connection, rollout_pk: int) -> tuple[bytes, bytes, bytes, bytes] | None:
    """``(nodes, token_ids, logprobs, mask)`` of a rollout's token trace, or None when it has none."""
    return conn.execute("SELECT nodes, token_ids, logprobs, mask FROM trace WHERE rollout_pk=?",
                        (rollout_pk,)).fetchone()


def trace_nodes(conn: sqlite3.Connection, rollout_pk: int) -> bytes | None:
    """The nodes document of a rollout's token trace (its tool sets among them), or None."""
    row = conn.execute("SELECT nodes FROM trace WHERE rollout_pk = ?", (rollout_pk,)).fetchone()
    return None if row is None else row[0]


def traced_rollouts(conn: sqlite3.Connection, run_id: str) -> list[tuple[Any, ...]]:
    """``(id, nodes, token_ids, logprobs, mask)`` of the run's rollouts that have a token trace."""
    return conn.execute(
        "SELECT r.id, t.nodes, t.token_ids, t.logprobs, t.mask FROM rollout r JOIN trace t ON t.rollout_pk = r.pk "
        "WHERE r.run_id=?", (run_id,)).fetchall()


__all__ = ["completed_evals", "compared_run", "error_kinds", "errored_rollouts", "reflected_rollouts",
           "reward_scores", "rollout_totals", "score_means", "task_prompts", "task_results", "task_rewards",
           "top_failure", "trace_nodes", "trace_row", "traced_rollouts"]
