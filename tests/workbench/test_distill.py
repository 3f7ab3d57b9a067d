"""``workbench distill ENV --teacher T --student S``: a real mock teacher (an OpenAI-compatible server process,
registered with ``workbench models add``) always says the code word; its rollouts on the training split
become SFT data for the embedded tiny model, which the real trainer fine-tunes on the CPU; the student
before and after, and the teacher, are evaluated on the held-out tasks. Every stage is a run in the store,
read back here with sqlite3; bad input is one clear line."""

from __future__ import annotations

import json
import sqlite3
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CliResult, MockServer, assert_user_error, last_json, mock_args

pytest.importorskip("torch")
pytest.importorskip("peft")

CODE_WORD = "42"
TASKS = 16

#: The answer is a code word no prompt hints at: the base student says it (exactly) next to never.
CODEWORD_ENV = '''
import workbench as wb

THINGS = ["apple", "river", "stone", "cloud", "tiger", "maple", "ocean", "amber", "cedar", "delta", "flint",
          "grove", "haven", "ivory", "jelly", "koala"]


def load_environment(n: int = 16) -> wb.Environment:
    rows = [{"prompt": f"Say the code word for {THINGS[i % len(THINGS)]}.", "answer": "42"} for i in range(n)]
    rubric = wb.Rubric()

    @rubric.reward
    def said_it(completion: str, answer: str) -> float:
        return float(completion.strip() == answer)

    return wb.Environment(name="codeword", tasks=wb.TaskSet.from_records(rows, name="codeword"),
                          harness=wb.SingleTurn(), rubric=rubric, sampling=wb.Sampling(max_tokens=8))
'''

#: The run config the environment ships beside its file. The tiny model's default LoRA (its linear layers,
#: not the output head) cannot raise one token's probability past a few percent, since the final norm and the
#: tied output embeddings stay as they are; with the output head adapted too, the code word is learnt in
#: about fifteen steps.
CODEWORD_TRAIN_TOML = '''
[trainer]
target_modules = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]
'''


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockServer]:
    """A mock teacher that answers every request with the code word."""
    server = MockServer(mock_args("instant", reply=CODE_WORD), tmp_path_factory.mktemp("mock-logs") / "teacher.log")
    yield server
    server.stop()


@pytest.fixture
def codeword(cli: Callable[..., CliResult], write_env: Callable[..., Path], teacher: MockServer) -> Path:
    """The environment file (and its train.toml), with the teacher registered as ``mock-teacher``."""
    write_env(CODEWORD_TRAIN_TOML, "codeword.train.toml")
    res = cli("models", "add", "mock-teacher", "--base-url", teacher.base_url, "--model-id", "mock-model")
    assert res.rc == 0, res.stderr
    return write_env(CODEWORD_ENV, "codeword.py")


@pytest.fixture
def student_server_stopped(cli_env: dict[str, str], tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The student's embedded server (started by the held-out evals in this test's XDG dirs) is stopped after."""
    yield
    for k, v in cli_env.items():
        if k.startswith("XDG_"):
            monkeypatch.setenv(k, v)
    from workbench_local.server.embedded import stop_server

    stop_server(str(tiny_dir))


def _runs(db: Path) -> dict[str, dict[str, Any]]:
    """Every run of the store by its pipeline stage (runs of no pipeline under their id)."""
    conn = sqlite3.connect(db)
    out = {}
    for rid, kind, status, model, config in conn.execute("SELECT id, kind, status, model, config FROM run"):
        cfg = json.loads(config)
        out[(cfg.get("pipeline") or {}).get("stage", rid)] = {"id": rid, "kind": kind, "status": status,
                                                               "model": model, "config": cfg}
    return out


def _rollouts(db: Path, run_id: str) -> list[tuple[int, float | None, str]]:
    conn = sqlite3.connect(db)
    return conn.execute("SELECT task_index, reward, completion FROM rollout WHERE run_id = ? ORDER BY task_index",
                        (run_id,)).fetchall()


def test_the_students_held_out_score_on_the_teachers_answers_rises(
        cli: Callable[..., CliResult], store_path: Path, codeword: Path, tiny_dir: Path, teacher: MockServer,
        student_server_stopped: None) -> None:
    heldout, n_train, r = 4, 6, 2
    res = cli("distill", codeword, "--teacher", "mock-teacher", "--student", tiny_dir, "--heldout", heldout,
              "-n", n_train, "-r", r, "--steps", 30, "--lr", 3e-3, "--threads", 1, "--json", timeout=400)
    assert res.rc == 0, res.stderr[-3000:]
    out = last_json(res.stdout)
    pid = out["pipeline_id"]
    assert pid.startswith("dst-") and out["kept"] == out["teacher_rollouts"] == n_train * r

    runs = _runs(store_path)
    stages = ["teacher-train", "train", "student-before", "student-after", "teacher"]
    assert set(stages) <= set(runs), runs.keys()
    for stage in stages:
        assert runs[stage]["config"]["pipeline"] == {"id": pid, "kind": "distill", "stage": stage}
        assert runs[stage]["status"] == "completed", runs[stage]
    assert (runs["teacher-train"]["id"], runs["train"]["id"]) == (out["teacher_run"], out["train_run"])
    assert {k: runs[k.replace("_", "-")]["id"] for k in out["runs"]} == out["runs"]

    # The teacher ran the first -n tasks of the training split, -r times each, and always said the code word.
    taught = _rollouts(store_path, out["teacher_run"])
    assert runs["teacher-train"]["config"]["task_indices"] == list(range(n_train))
    assert sorted({i for i, _, _ in taught}) == list(range(n_train)) and len(taught) == n_train * r
    assert all(c == CODE_WORD and rw == 1.0 for _, rw, c in taught)

    # The student was trained with SFT on that run, rendered with its own chat template, holding out the same tasks.
    train_cfg = runs["train"]["config"]
    assert runs["train"]["kind"] == "train" and train_cfg["data"]["runs"] == [out["teacher_run"]]
    assert train_cfg["algorithm"] == {"name": "sft", "min_reward": 1.0} and train_cfg["loss"]["name"] == "ce"
    assert train_cfg["loop"]["eval_tasks"] == heldout and train_cfg["loop"]["max_steps"] == 30
    assert train_cfg["trainer"]["model"] == str(tiny_dir) and "lm_head" in train_cfg["trainer"]["target_modules"]
    conn = sqlite3.connect(store_path)
    events = [m for (m,) in conn.execute("SELECT message FROM train_metric WHERE run_id = ? AND kind = 'event'",
                                         (out["train_run"],))]
    assert any(e.startswith(f"SFT data: {n_train * r} rollouts of {out['teacher_run']} ({n_train * r} rendered")
               for e in events), events

    # The three held-out evals: the same last tasks, one comparison, the trained adapter served under its own name.
    held = list(range(TASKS - heldout, TASKS))
    for stage in ("student-before", "student-after", "teacher"):
        cfg = runs[stage]["config"]
        assert cfg["comparison_id"] == pid and cfg["task_indices"] == held
        assert [i for i, _, _ in _rollouts(store_path, runs[stage]["id"])] == held
    assert runs["student-after"]["model"] == f"distilled-{out['train_run']}"
    assert runs["teacher"]["model"] == "mock-model" and runs["student-before"]["model"] != runs["student-after"]["model"]

    # The margin, from the stored completions (each reward recomputed here) and from the stored rewards.
    said = {s: [float(c.strip() == CODE_WORD) for _, _, c in _rollouts(store_path, runs[s]["id"])]
            for s in ("student-before", "student-after", "teacher")}
    stored = {s: [rw for _, rw, _ in _rollouts(store_path, runs[s]["id"])] for s in said}
    assert said == stored
    before, after = (sum(said[s]) / heldout for s in ("student-before", "student-after"))
    assert after - before >= 0.5 and after >= 0.75, said
    assert out["heldout"] == {"student_before": before, "student_after": after, "teacher": 1.0}

    cmp = out["comparison"]
    assert cmp["baseline"] == out["runs"]["student_before"] and cmp["tasks"] == heldout
    models = {m["run_id"]: m for m in cmp["models"]}
    assert models[out["runs"]["student_after"]]["delta"] == pytest.approx(after - before)
    # `workbench compare` finds the same three runs by the pipeline id.
    again = cli("compare", pid, "--baseline", out["runs"]["student_before"], "--json")
    assert again.rc == 0, again.stderr
    assert {m["run_id"] for m in last_json(again.stdout)["models"]} == set(out["runs"].values())


@pytest.mark.parametrize(("args", "fragments"), [
    (["--min-reward", "2"], ["no rollout of the teacher run {teacher_run}", "--min-reward 2", "best reward was 1",
                             "lower --min-reward"]),
    (["--teacher", "mock-teachr"], ["--teacher mock-teachr", "did you mean 'mock-teacher'"]),
    (["--heldout", str(TASKS)], [f"--heldout {TASKS}", "leaves no training tasks", f"{TASKS} tasks"]),
    (["--min-reward", "nan"], ["--min-reward", "finite"]),
    (["--min-reward", "inf"], ["--min-reward", "finite"]),
    (["--method", "on-policy"], ["on-policy distillation needs a teacher that tokenizes like the student",
                                 "does not answer /tokenize"]),
    (["--method", "on-policy", "-n", "3"], ["-n/--num-tasks limits the teacher's rollouts of --method sft"]),
    (["--student", "mock-teacher"], ["--student mock-teacher", "registered endpoint", "cannot be trained"]),
])
def test_bad_input_is_one_clear_line(cli: Callable[..., CliResult], store_path: Path, codeword: Path,
                                     tiny_dir: Path, teacher: MockServer, args: list[str],
                                     fragments: list[str]) -> None:
    flags = {"--teacher": "mock-teacher", "--student": str(tiny_dir), "-r": "2", "--steps": "2"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        flags[flag] = value
    requests = teacher.requests()
    res = cli("distill", codeword, *[x for kv in flags.items() for x in kv])
    runs = _runs(store_path) if store_path.exists() else {}
    teacher_run = runs.get("teacher-train", {}).get("id", "")
    assert_user_error(res, *(f.format(teacher_run=teacher_run) for f in fragments))
    if "--min-reward" in args and args[1] == "2":
        # The teacher ran and its run is kept; nothing was trained.
        assert list(runs) == ["teacher-train"] and runs["teacher-train"]["status"] == "completed"
        assert teacher.requests() - requests == (TASKS - TASKS // 5) * 2
        assert f"teacher-train: run {teacher_run}" in res.stdout
    else:
        # Refused before anything ran.
        assert runs == {} and teacher.requests() == requests


#: On-policy distillation needs a student that sometimes samples what the teacher says: the base tiny model
#: answers these prompts with exactly "1" now and then (a few percent), never with "42".
ONE_ENV = CODEWORD_ENV.replace('"answer": "42"', '"answer": "1"').replace('name="codeword"', 'name="codeword1"')


@pytest.fixture
def one_teacher(cli: Callable[..., CliResult], write_env: Callable[..., Path], mock_server: Callable[..., Any],
                cli_env: dict[str, str], tiny_dir: Path, store_path: Path, monkeypatch: pytest.MonkeyPatch
                ) -> Iterator[tuple[Path, str]]:
    """A real teacher served by Workbench's own server: the tiny model SFT-distilled from a mock that says "1",
    its adapter loaded into the embedded server as ``teacher-1`` and registered as the model ``teacher1``."""
    write_env(CODEWORD_TRAIN_TOML, "codeword1.train.toml")
    env = write_env(ONE_ENV, "codeword1.py")
    says_one = mock_server("instant", "--reply", "1")
    assert cli("models", "add", "says-one", "--base-url", says_one.base_url, "--model-id", "mock-model").rc == 0
    res = cli("distill", env, "--teacher", "says-one", "--student", tiny_dir, "--heldout", 4, "-n", 6, "-r", 2,
              "--steps", 30, "--lr", 3e-3, "--threads", 1, "--json", timeout=400)
    assert res.rc == 0, res.stderr[-3000:]
    sft = last_json(res.stdout)
    assert sft["heldout"]["student_after"] == 1.0
    for k, v in cli_env.items():
        if k.startswith("XDG_"):
            monkeypatch.setenv(k, v)
    from workbench_local.server.embedded import ensure_server, stop_server

    from workbench.config.paths import data_dir

    base_url, _ = ensure_server(str(tiny_dir))
    adapter = data_dir() / "runs" / sft["train_run"] / "checkpoint" / "adapter"
    req = urllib.request.Request(base_url + "/load_lora_adapter", method="POST", headers={
        "Content-Type": "application/json"}, data=json.dumps({"lora_name": "teacher-1", "lora_path": str(adapter)}).encode())
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert resp.status == 200
    assert cli("models", "add", "teacher1", "--base-url", base_url, "--model-id", "teacher-1").rc == 0
    yield env, sft["pipeline_id"]
    stop_server(str(tiny_dir))


def test_on_policy_distillation_scores_the_students_tokens_with_the_teacher(
        cli: Callable[..., CliResult], store_path: Path, tiny_dir: Path, one_teacher: tuple[Path, str]) -> None:
    env, sft_pipeline = one_teacher
    res = cli("distill", env, "--teacher", "teacher1", "--student", tiny_dir, "--method", "on-policy",
              "--heldout", 4, "--steps", 30, "--lr", 3e-3, "--threads", 1, "--json", timeout=400)
    assert res.rc == 0, res.stderr[-3000:]
    out = last_json(res.stdout)
    assert out["teacher_run"] is None and out["kept"] == 0, "no teacher data: the student samples"
    runs = {(r["config"].get("pipeline") or {}).get("stage"): r for r in _runs_of(store_path, out["pipeline_id"])}
    assert set(runs) == {"train", "student-before", "student-after", "teacher"}
    algo = runs["train"]["config"]["algorithm"]
    assert algo["name"] == "distill" and algo["teacher_model"] == "teacher-1"
    assert runs["train"]["config"]["loss"]["name"] == "pg" and not runs["train"]["config"]["data"]["runs"]

    conn = sqlite3.connect(store_path)
    steps = [json.loads(m) for (m,) in conn.execute(
        "SELECT metrics FROM train_metric WHERE run_id = ? AND kind = 'step' ORDER BY step", (out["train_run"],))]
    assert len(steps) == 30 and all(s["teacher_s"] > 0 for s in steps), "the teacher scored every batch"
    first, last = (sum(s["reverse_kl"] for s in part) / 5 for part in (steps[:5], steps[-5:]))
    assert last < first / 2, (first, last)
    said = {s: [float(c.strip() == "1") for _, _, c in _rollouts(store_path, runs[s]["id"])]
            for s in ("student-before", "student-after", "teacher")}
    assert sum(said["teacher"]) == 4
    assert sum(said["student-after"]) - sum(said["student-before"]) >= 2, said


def _runs_of(db: Path, pipeline_id: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT id, kind, status, model, config FROM run "
                        "WHERE json_extract(config, '$.pipeline.id') = ?", (pipeline_id,)).fetchall()
    return [{"id": r[0], "kind": r[1], "status": r[2], "model": r[3], "config": json.loads(r[4])} for r in rows]
