"""``workbench show ROLLOUT`` prints an empty message and an empty answer as text: "(empty)" and "",
never Rich markup written out literally."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import cli_environment, run_workbench
from workbench.authoring.rubric import Scores
from workbench.records.rollout import ModelCall, Usage
from workbench.records.task import Task
from workbench.store import RolloutRecord, Store


@pytest.mark.parametrize(("content", "answer"), [("", ""), (None, ""), ("", "3")])
def test_an_empty_message_and_answer_print_as_text(tmp_path: Path, content: str | None, answer: str) -> None:
    db = tmp_path / "workbench.db"
    store = Store(db)
    try:
        store.create_run("1114-eeeeee", kind="eval", env_name="adder", model="m", status="completed")
        w = store.writer()
        w.submit([RolloutRecord(
            id="1114-eeeeee.0.0", run_id="1114-eeeeee", env_name="adder", model="m",
            task=Task(prompt="What is 1 + 2?", answer=answer), task_index=0, sample_index=0, status="ok",
            error_kind=None, reward=0.0, usage=Usage(3, 0), duration_s=0.1, turns=1, completion="",
            messages=[{"role": "user", "content": "What is 1 + 2?"}, {"role": "assistant", "content": content}],
            state={}, scores=Scores(rewards={"correct": 0.0}, total=0.0),
            calls=[ModelCall(0, 1, None, "stop", 3, 0, 0.01)], errors=[], created_at=1_700_000_000.0)])
        w.close()
    finally:
        store.close()
    res = run_workbench(["show", "1114-eeeeee.0.0", "--db", db], cli_environment(tmp_path))
    assert res.rc == 0, res.stderr
    assert "(empty)" in res.stdout and f"answer: {json.dumps(answer)}" in res.stdout  # the answer as JSON
    assert "[dim]" not in res.stdout and "[/]" not in res.stdout
