"""scripts/learning_curve.py on a hand-made store: the rows it derives and the files it writes."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from workbench.store import Store

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("learning_curve", ROOT / "scripts" / "learning_curve.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _store(path: Path) -> str:
    """An eval run, an older and a newer training run; the newer one has evals at steps 0 and 2, a
    skipped step, an event, and step 2 recorded twice (as after a resume)."""
    with Store(path) as s:
        s.create_run("ev", kind="eval", created_at=3000.0)
        s.create_run("old", kind="train", created_at=500.0)
        s.record_train("old", 1, "step", {"reward_mean": 0.9})
        s.conn.execute("UPDATE train_metric SET created_at=504.0")
        s.create_run("new", kind="train", env_name="arithmetic", model="/m/workbench-tiny-v1", created_at=1000.0)
        recs = [(0, "eval", {"reward_mean": 0.25}, 1000.5),
                (1, "step", {"reward_mean": 0.1, "reward_std": 0.2}, 1004.0),
                (1, "skipped", {"reward_mean": 9.0}, 1005.0), (2, "step", {"reward_mean": 0.3}, 1006.0),
                (2, "event", {}, 1006.1), (2, "step", {"reward_mean": 0.4, "reward_std": 0.1}, 1010.0),
                (2, "eval", {"reward_mean": 0.5}, 1011.0)]
        for step, kind, metrics, at in recs:
            s.record_train("new", step, kind, metrics)
            s.conn.execute("UPDATE train_metric SET created_at=? WHERE id=(SELECT MAX(id) FROM train_metric)", (at,))
    return str(path)


def test_rows_of_the_newest_train_run(tmp_path: Path) -> None:
    lc = _script()
    db = _store(tmp_path / "s.db")
    with Store(db) as s:
        assert lc.newest_train_run(s) == "new"
        rows = lc.curve_rows(s, "new")
    assert [(r["step"], r["wall_s"], r["reward_mean"], r["eval_reward_mean"]) for r in rows] == [
        (0, 0.0, None, 0.25), (1, 4.0, 0.1, None), (2, 10.0, 0.4, 0.5)]
    assert rows[2]["eval_done_s"] == 11.0 and rows[1]["reward_std"] == 0.2


def test_writes_csv_json_and_png(tmp_path: Path) -> None:
    lc = _script()
    db = _store(tmp_path / "s.db")
    assert lc.main(["--db", db, "--data", str(tmp_path / "c.csv"), "--no-png"]) == 0
    with open(tmp_path / "c.csv") as f:
        got = list(csv.DictReader(f))
    assert [r["step"] for r in got] == ["0", "1", "2"]
    assert got[0]["reward_mean"] == "" and got[2]["eval_reward_mean"] == "0.5"
    assert lc.main(["old", "--db", db, "--data", str(tmp_path / "c.json"), "--no-png"]) == 0
    assert json.loads((tmp_path / "c.json").read_text())["rows"] == [  # no eval: no step-0 row
        {"step": 1, "wall_s": 4.0, "reward_mean": 0.9, "reward_std": None, "eval_reward_mean": None,
         "eval_done_s": None}]
    with pytest.raises(SystemExit, match="not a training run"):
        lc.main(["ev", "--db", db, "--no-png"])
    pytest.importorskip("matplotlib")
    png = tmp_path / "c.png"
    assert lc.main(["--db", db, "--data", str(tmp_path / "d.csv"), "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
