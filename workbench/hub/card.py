"""An environment's eval card: what a published version carries besides its files.

The card holds the environment's README (its folder's ``README.md``, else its module docstring), its reward
design (every scoring function: kind, weight and first docstring line), and the latest completed eval of each
model from this machine's store (mean and standard error, rollouts, pass@k, cost, the env version it ran on, the date).
It travels in the wheel twice: as JSON (``workbench_card.json`` in the ``.dist-info``, what ``hub show`` reads)
and as the package's Markdown description, which any index's web page shows.
"""

from __future__ import annotations

import inspect
import sqlite3
import time
from pathlib import Path
from typing import Any

from workbench.store.reports import completed_evals

CARD_FILE = "workbench_card.json"
README_NAMES = ("README.md", "README.rst", "README.txt", "README")
RESULTS_PER_CARD = 20


def readme(env: Any) -> str:
    """The package's README, else the docstring of its module (or of its ``__init__.py``), else its description."""
    import ast

    source = Path(env.source) if env.source else None
    if source is None or not source.exists():
        return env.description or ""
    if source.is_dir():
        for name in README_NAMES:  # a README that links outside the folder is not the environment's
            if (source / name).is_file() and (source / name).resolve().is_relative_to(source.resolve()):
                return (source / name).read_text(encoding="utf-8", errors="replace")
        source = source / "__init__.py"
    try:
        return ast.get_docstring(ast.parse(source.read_text(encoding="utf-8", errors="replace"))) or env.description or ""
    except (OSError, SyntaxError):
        return env.description or ""


def reward_design(env: Any) -> list[dict[str, Any]]:
    out = []
    for f in env.rubric.functions:
        doc = (inspect.getdoc(f.fn) or "").strip().splitlines()
        out.append({"name": f.name, "kind": f.kind, "weight": f.weight, "doc": doc[0] if doc else ""})
    return out


def latest_results(conn: sqlite3.Connection, env_name: str) -> list[dict[str, Any]]:
    """Per model, the newest completed eval run of ``env_name`` with its summary's figures."""
    import json

    rows = completed_evals(conn, env_name)
    seen: set[str] = set()
    out = []
    for run_id, model, version, created, summary in rows:
        if model in seen:
            continue
        s = json.loads(summary) if summary else {}
        if not s.get("rollouts"):
            continue
        seen.add(model)
        out.append({"model": model, "mean_reward": s.get("mean_reward"), "stderr": s.get("stderr"),
                    "rollouts": s.get("rollouts"), "tasks": s.get("tasks"), "pass_at_k": s.get("pass_at_k") or {},
                    "cost_usd": s.get("cost_usd"), "env_version": version, "run_id": run_id,
                    "date": time.strftime("%Y-%m-%d", time.gmtime(created))})
        if len(out) >= RESULTS_PER_CARD:
            break
    return out


def build_card(env: Any, *, name: str, version: str, digest: str, env_version: str,
               conn: sqlite3.Connection | None, forked_from: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"format": 1, "env": name, "version": version, "hash": digest, "env_version": env_version,
            "description": env.description or "", "readme": readme(env), "rewards": reward_design(env),
            "results": latest_results(conn, env.name) if conn is not None else [], "forked_from": forked_from,
            "harness": env.harness.describe(), "tasks": _count(env), "framework": env.adapter or "workbench"}


#: The type each field of a card must have when present (a card from an index is data from outside).
_FIELDS: dict[str, tuple[type, ...]] = {
    "format": (int,), "env": (str,), "version": (str,), "hash": (str,), "env_version": (str,),
    "description": (str,), "readme": (str,), "rewards": (list,), "results": (list,),
    "forked_from": (dict, type(None)), "harness": (str, type(None)), "tasks": (int, type(None)),
    "framework": (str,),
}
_ROW_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "rewards": {"name": (str,), "kind": (str,), "weight": (int, float), "doc": (str,)},
    "results": {"model": (str,), "mean_reward": (int, float, type(None)), "stderr": (int, float, type(None)),
                "rollouts": (int, type(None)), "pass_at_k": (dict, type(None)), "cost_usd": (int, float, type(None)),
                "env_version": (str, type(None)), "date": (str, type(None)), "run_id": (str, type(None))},
}

#: What every card and each of its rows holds (what ``hub show`` prints).
_REQUIRED = ("env", "version", "hash", "env_version")
_ROW_REQUIRED = {"rewards": ("name", "kind", "weight", "doc"), "results": ("model",)}


def card_problem(card: object) -> str | None:
    """Why ``card`` is not a usable eval card (not an object, a field of the wrong type), or None."""
    if not isinstance(card, dict):
        return f"the card is {type(card).__name__ if card is not None else 'null'}, not an object"
    for key, types in _FIELDS.items():
        if key in card and (not isinstance(card[key], types) or isinstance(card[key], bool)):
            return f"its field {key!r} is {type(card[key]).__name__}, not {' or '.join(t.__name__ for t in types)}"
    missing = [k for k in _REQUIRED if not card.get(k)]
    if missing:
        return f"it has no {', '.join(repr(k) for k in missing)}"
    for key, fields in _ROW_FIELDS.items():
        for i, row in enumerate(card.get(key) or []):
            if not isinstance(row, dict):
                return f"{key}[{i}] is {type(row).__name__}, not an object"
            gone = [f for f in _ROW_REQUIRED[key] if f not in row]
            if gone:
                return f"{key}[{i}] has no {', '.join(repr(f) for f in gone)}"
            for f, types in fields.items():
                if f in row and (not isinstance(row[f], types) or isinstance(row[f], bool)):
                    return f"{key}[{i}].{f} is {type(row[f]).__name__}, not {' or '.join(t.__name__ for t in types)}"
            passk = row.get("pass_at_k") or {} if key == "results" else {}
            if any(not isinstance(v, int | float) or isinstance(v, bool) for v in passk.values()):
                return f"{key}[{i}].pass_at_k holds a value that is not a number"
    return None


def _count(env: Any) -> int | None:
    try:
        return len(list(env.tasks))
    except Exception:  # a task source that cannot be listed here: the card says nothing of its size
        return None


def markdown(card: dict[str, Any]) -> str:
    """The card as the package's long description."""
    lines = [f"# {card['env']} {card['version']}", "", card.get("description") or "", "",
             f"Workbench environment; content hash `{card['hash']}` (env version `{card['env_version']}`)."]
    if card.get("forked_from"):
        f = card["forked_from"]
        lines.append(f"Forked from {f.get('name')} {f.get('version')} (`{str(f.get('hash', ''))[:12]}`).")
    lines += ["", "## Reward design", "", "| function | kind | weight | what |", "| --- | --- | --- | --- |"]
    lines += [f"| `{r['name']}` | {r['kind']} | {r['weight']:g} | {r['doc']} |" for r in card.get("rewards", [])]
    lines += ["", "## Results", ""]
    if card.get("results"):
        lines += ["| model | reward | n | pass@k | cost | env version | date |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in card["results"]:
            se = f" (se {r['stderr']:.3f})" if r.get("stderr") is not None else ""
            mean = "-" if r.get("mean_reward") is None else f"{r['mean_reward']:.3f}{se}"
            passk = ", ".join(f"{k} {v:.2f}" for k, v in (r.get("pass_at_k") or {}).items()) or "-"
            cost = "-" if r.get("cost_usd") is None else f"${r['cost_usd']:.4f}"
            lines.append(f"| {r['model']} | {mean} | {r['rollouts']} | {passk} | {cost} | {r['env_version']} | {r['date']} |")
    else:
        lines.append("No eval results were published with this version.")
    if card.get("readme"):
        lines += ["", "## README", "", card["readme"].strip()]
    return "\n".join(lines).strip() + "\n"


__all__ = ["CARD_FILE", "build_card", "card_problem", "latest_results", "markdown", "readme", "reward_design"]
