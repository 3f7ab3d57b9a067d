"""`workbench show RUN` lists the run's rollouts (id, task, sample, reward, status, a one-line completion), in
the order and page asked for, as text (a completion's markup prints as typed); `runs RUN` prints a summary's
mappings as `pass@1 0.450`, never a Python repr."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import last_json
from workbench.store import Store

N = 25
LOUD = "[bold]loud[/bold] and [red]red[/]"


def _chats() -> list[dict[str, Any]]:
    chats = [{"messages": [{"role": "user", "content": f"What is {i} + {i}?"},
                           {"role": "assistant", "content": f"It is {2 * i}\nsecond line " + "x" * 200}],
              "reward": i / 10} for i in range(N - 1)]
    chats.append({"messages": [{"role": "user", "content": "Shout"}, {"role": "assistant", "content": LOUD}],
                  "reward": 0.05})
    return chats


@pytest.fixture
def imported(cli: Callable[..., Any], tmp_path: Path, store_path: Path) -> str:
    f = tmp_path / "chats.jsonl"
    f.write_text("".join(json.dumps(c) + "\n" for c in _chats()))
    res = cli("import", f, "--format", "openai-jsonl", "--model", "m", "--db", store_path, "--json")
    assert res.rc == 0, res.stderr
    return str(last_json(res.stdout)["run_id"])


def _show(cli: Callable[..., Any], store_path: Path, run: str, *flags: Any) -> dict[str, Any]:
    res = cli("show", run, *flags, "--db", store_path, "--json")
    assert res.rc == 0, res.stderr
    return dict(last_json(res.stdout))


@pytest.mark.parametrize(("flags", "rewards"), [
    ((), [0.05, 2.3, 2.2]),  # newest first: the loud one was imported last
    (("--sort", "oldest"), [0.0, 0.1, 0.2]),
    (("--sort", "worst"), [0.0, 0.05, 0.1]),
    (("--sort", "best"), [2.3, 2.2, 2.1]),
    (("--sort", "worst", "--limit", "2", "--offset", "1"), [0.05, 0.1]),
    (("--sort", "worst", "--limit", "2", "--page", "2"), [0.1, 0.2]),
])
def test_show_run_pages_its_rollouts(cli: Callable[..., Any], store_path: Path, imported: str,
                                     flags: tuple[str, ...], rewards: list[float]) -> None:
    out = _show(cli, store_path, imported, *flags, *(() if "--limit" in flags else ("--limit", "3")))
    assert [r["reward"] for r in out["rollouts"]] == pytest.approx(rewards)
    assert out["page"]["total"] == N
    for r in out["rollouts"]:
        assert r["id"].startswith(imported + ".") and isinstance(r["task"], int) and isinstance(r["sample"], int)
        assert "\n" not in r["completion"] and len(r["completion"]) <= 60 and r["status"] == "ok"


def test_show_run_text_names_its_rollouts_and_prints_markup_as_typed(cli: Callable[..., Any], store_path: Path,
                                                                       imported: str) -> None:
    out = _show(cli, store_path, imported, "--limit", "5")
    res = cli("show", imported, "--limit", "5", "--db", store_path)
    assert res.rc == 0, res.stderr
    for r in out["rollouts"]:
        line = next(ln for ln in res.stdout.splitlines() if ln.startswith(r["id"] + "\t"))
        assert line.split("\t")[1:4] == [str(r["task"]), str(r["sample"]), f"{r['reward']:.3f}"]
    assert LOUD in res.stdout  # as typed: not bold, not swallowed
    assert "rollouts 1-5 of 25" in res.stdout and "--offset 5" in res.stdout
    opened = cli("show", out["rollouts"][0]["id"], "--db", store_path)
    assert opened.rc == 0 and LOUD in opened.stdout


@pytest.mark.parametrize(("flags", "message"), [
    (("--sort", "loudest"), "--sort"),
    (("--page", "0"), "--page"),
    (("--limit", "0"), "--limit"),
])
def test_bad_paging_is_one_line(cli: Callable[..., Any], store_path: Path, imported: str, flags: tuple[str, ...],
                                message: str) -> None:
    res = cli("show", imported, *flags, "--db", store_path)
    assert res.rc != 0 and "Traceback" not in res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) <= 3 and message in res.stderr, res.stderr


def test_runs_run_prints_mappings_not_reprs(cli: Callable[..., Any], store_path: Path) -> None:
    store = Store(store_path)
    try:
        store.create_run("1205-summary", kind="eval", env_name="arithmetic", model="m", status="completed",
                         summary={"mean_reward": 0.5, "pass_at_k": {"pass@1": 0.45, "pass@2": 0.6733333333333331},
                                  "error_kinds": {}, "models": ["a", "b"], "rollouts": 4})
    finally:
        store.close()
    res = cli("runs", "1205-summary", "--db", store_path)
    assert res.rc == 0, res.stderr
    assert "pass@1 0.450  pass@2 0.673" in res.stdout and "models a, b" in res.stdout
    assert "{" not in res.stdout and "[" not in res.stdout and "0.67333" not in res.stdout, res.stdout
