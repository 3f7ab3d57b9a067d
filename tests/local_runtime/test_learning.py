"""The local loop learns something that generalises: `workbench train next_number` with the env's
shipped config, from the real default build of the embedded model, raises the reward on held-out
numbers it never trains on, by a margin several standard errors above the eval's own noise. It trains
in ``--sync`` mode, whose seeded sampling makes the curve the same on a loaded machine.

The noise is measured, not assumed: the first and the last held-out evals sample the same 20 numbers
16 times each, and ``workbench compare`` gives the paired difference with its bootstrap CI."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CliResult, last_json

#: How many standard errors of the paired difference the held-out gain must clear.
MARGIN_SE = 3.0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_training_raises_the_heldout_reward_beyond_the_noise(cli: Callable[..., CliResult], tmp_path: Path,
                                                            default_tiny_build: Path) -> None:
    db = tmp_path / "wb.db"
    # --sync with seeded sampling: every step samples from the newest policy with the same seeds however
    # loaded the machine is, so the curve does not depend on timing.
    res = cli("train", "next_number", "--trainer.model", default_tiny_build, "--sync", "--db", db, "--json",
              timeout=540)
    assert res.rc == 0, res.stderr[-3000:]
    s: dict[str, Any] = last_json(res.stdout)
    assert s["steps"] == 30 and s["dropped"] == 0, s
    first, last = s["heldout_first"], s["heldout_last"]
    assert 0 < s["heldout_stderr_first"] < 0.1 and 0 < s["heldout_stderr_last"] < 0.1, s
    # The first and last evals, paired by task: the CI is the noise of the difference.
    evals = [f"{s['run_id']}-eval0", f"{s['run_id']}-eval30"]
    cmp = cli("compare", *evals, "--db", db, "--json")
    assert cmp.rc == 0, cmp.stderr
    result = last_json(cmp.stdout)
    pair = result["models"][1]
    assert (result["tasks"], pair["rollouts"]) == (20, 320), result
    lo, hi = pair["ci95"]
    se = (hi - lo) / (2 * 1.96)
    gain = last - first
    assert abs(pair["delta"] - gain) < 1e-6, (pair, s)
    assert gain > MARGIN_SE * se, json.dumps({"gain": gain, "se": se, "summary": s})
    assert s["reward_end"] > s["reward_start"], s


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_multi_turn_run_learns_from_token_exact_traces(cli: Callable[..., CliResult], tmp_path: Path,
                                                         default_tiny_build: Path) -> None:
    """Three questions per conversation (next_number's CountOn): the training reward rises, and every
    rollout the run sampled was trained on exactly the tokens the server produced (token_mismatch 0)."""
    import sqlite3

    db = tmp_path / "wb.db"
    res = cli("train", "next_number", "-a", '{"rounds": 3}', "--trainer.model", default_tiny_build, "--db", db,
              "--max-steps", "20", "--loop.eval_every", "0", "--json", timeout=540)
    assert res.rc == 0, res.stderr[-3000:]
    s = last_json(res.stdout)
    assert s["steps"] == 20 and s["dropped"] == 0 and s["reward_end"] > s["reward_start"] + 0.1, s
    conn = sqlite3.connect(db)
    n, mismatched = conn.execute("SELECT count(*), sum(value) FROM score WHERE name = 'token_mismatch'").fetchone()
    assert n >= 20 * 128 and mismatched == 0, (n, mismatched)
    turns = [json.loads(r[0]) for r in conn.execute(
        "SELECT r.messages FROM rollout r WHERE r.run_id = ? LIMIT 5", (s["run_id"],))]
    assert all(sum(m["role"] == "assistant" for m in msgs) == 3 for msgs in turns), turns
