"""Harbor's trajectory format (ATIF): ``workbench export --format atif`` writes one Harbor trial folder per
rollout whose ``agent/trajectory.json`` validates against ATIF-v1.6 (``atif_schema``, a model written
from the spec), ``workbench import --format atif`` reads it back with the same messages, tool calls,
token usage and rewards, a Harbor job folder as Harbor lays it out imports with its verifier's
rewards, and bad input ends in one clear line naming the file and the field, with nothing written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CliResult, assert_user_error, last_json, query, write_file
from tests.workbench.atif_schema import Trajectory
from workbench.authoring.rubric import Scores
from workbench.records.rollout import ModelCall, RolloutError, Usage
from workbench.records.task import Task
from workbench.runs.import_traces import import_file
from workbench.store import RolloutRecord, Store
from workbench.store.rollout_detail import get_rollout

RUN = "1205-a7f001"
ADD = {"type": "function", "function": {"name": "add", "description": "Add two numbers",
                                        "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}}


def _call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATIONS: list[list[dict[str, Any]]] = [
    [{"role": "system", "content": "Use the tools."},
     {"role": "user", "content": "What is 4 + 5?"},
     {"role": "assistant", "content": None, "reasoning_content": "I should add.",
      "tool_calls": [_call("call_1", "add", '{"a": 4, "b": 5}'), _call("call_2", "add", '{"a": 0, "b": 0}')]},
     {"role": "tool", "tool_call_id": "call_2", "content": "0"},
     {"role": "tool", "tool_call_id": "call_1", "content": "9"},
     {"role": "user", "content": "Sure?"},
     {"role": "assistant", "content": [{"type": "text", "text": "It is 9."}]}],
    # what ATIF has no field for: a developer role, arguments spelled otherwise or not an object, a tool
    # message that answers no call, an image ATIF can name and a message's own fields
    [{"role": "developer", "content": "Be brief."},
     {"role": "user", "content": [{"type": "text", "text": "Look:"},
                                  {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}],
      "name": "ann"},
     {"role": "assistant", "content": "", "tool_calls": [_call("c1", "add", '{"a":1}'), _call("c2", "add", "oops"),
                                                           _call("c3", "add", {"a": 2})]},
     {"role": "tool", "tool_call_id": "c1", "content": "1", "name": "add"},
     {"role": "tool", "tool_call_id": "nobody", "content": "stray"},
     {"role": "assistant", "content": "[b]done[/b]", "refusal": None}],
]


def _record(i: int, messages: list[dict[str, Any]], reward: float | None) -> RolloutRecord:
    turns = sum(m["role"] == "assistant" for m in messages)
    calls = [ModelCall(k, 2 + k, None, "stop", 100 + 10 * k, 7 + k, 0.05) for k in range(turns)]
    return RolloutRecord(
        id=f"{RUN}.{i}.0", run_id=RUN, env_name="adder", model="mock-model",
        task=Task(prompt="p", answer=str(9 + i), info={"level": i}), task_index=i, sample_index=0,
        status="ok", error_kind=None, reward=reward,
        usage=Usage(sum(c.prompt_tokens for c in calls), sum(c.completion_tokens for c in calls), 0.002), duration_s=1.5,
        turns=turns, completion="", messages=messages, state={"offered_tools": [ADD]},
        scores=Scores(rewards={} if reward is None else {"correct": reward, "reward": 0.25}, metrics={"steps": 2.0},
                      total=reward),
        calls=calls, errors=[], created_at=1.7e9 + i)


@pytest.fixture
def model_run(store_path: Path) -> Path:
    """A model run in a real store: two rollouts (one without a reward) and a failed one export leaves out."""
    with Store(store_path) as store:
        store.create_run(RUN, kind="eval", env_name="adder", env_version="1.2", model="mock-model", status="completed")
        w = store.writer()
        failed = _record(2, CONVERSATIONS[0][:2], None)
        failed.status, failed.error_kind, failed.errors = "error", "timeout", [RolloutError("timeout", "model", "slow")]
        w.submit([_record(0, CONVERSATIONS[0], 0.75), _record(1, CONVERSATIONS[1], None), failed])
        w.close()
    return store_path


def _rollouts(store_path: Path, run_id: str) -> list[dict[str, Any]]:
    with Store(store_path) as store:
        return [get_rollout(store.conn, pk) for (pk,) in
                store.conn.execute("SELECT pk FROM rollout WHERE run_id = ? ORDER BY pk", (run_id,))]


def _trajectories(folder: Path) -> list[dict[str, Any]]:
    files = sorted(folder.glob("*/agent/trajectory.json"))
    docs = [json.loads(f.read_text()) for f in files]
    for doc in docs:
        Trajectory.model_validate(doc)  # the ATIF-v1.6 schema, strictly
    return docs


# -- the round trip ------------------------------------------------------------------------------------
def test_export_then_import_gives_the_same_rollouts(cli: Callable[..., CliResult], model_run: Path,
                                                    tmp_path: Path) -> None:
    out = tmp_path / "atif"
    res = cli("export", RUN, "--format", "atif", "-o", out)
    assert res.rc == 0, res.stderr
    assert "wrote 2 trajectories" in res.stdout
    assert sorted(p.name for p in out.iterdir()) == [f"{RUN}.0.0", f"{RUN}.1.0"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # its staging folder is gone
    docs = _trajectories(out)
    assert [d["schema_version"] for d in docs] == ["ATIF-v1.6"] * 2
    first = docs[0]
    assert [s["source"] for s in first["steps"]] == ["system", "user", "agent", "user", "agent"]
    agent = first["steps"][2]
    assert agent["tool_calls"][0] == {"tool_call_id": "call_1", "function_name": "add", "arguments": {"a": 4, "b": 5}}
    assert [r["source_call_id"] for r in agent["observation"]["results"]] == ["call_2", "call_1"]
    assert agent["metrics"] == {"prompt_tokens": 100, "completion_tokens": 7}
    assert agent["reasoning_content"] == "I should add." and "extra" not in agent  # said in ATIF's own fields
    assert first["final_metrics"]["total_prompt_tokens"] == 210 and first["agent"]["tool_definitions"] == [ADD]
    assert json.loads((out / f"{RUN}.0.0" / "verifier" / "reward.json").read_text()) == {"reward": 0.75,
                                                                                         "correct": 0.75}
    assert not (out / f"{RUN}.1.0" / "verifier").exists()  # no reward, no verifier file
    second = docs[1]["steps"]
    assert second[1]["message"][1] == {"type": "image", "source": {"media_type": "image/png",
                                                                    "path": "https://example.com/cat.png"}}

    res = cli("import", out, "--format", "atif", "--json")
    assert res.rc == 0, res.stderr
    info = last_json(res.stdout)
    assert (info["rollouts"], info["skipped"], info["rewarded"], info["model"]) == (2, 0, 1, "mock-model")
    before, after = _rollouts(model_run, RUN)[:2], _rollouts(model_run, info["run_id"])
    for a, b in zip(before, after, strict=True):
        assert b["messages"] == a["messages"]
        assert (b["prompt_tokens"], b["completion_tokens"]) == (a["prompt_tokens"], a["completion_tokens"])
        assert (b["reward"], b["rewards"], b["metrics"]) == (a["reward"], a["rewards"], a["metrics"])
        assert (b["answer"], b["info"], b["model"], b["source"]) == (a["answer"], a["info"], a["model"], "imported")
        assert b["state"]["import"]["tools"] == [ADD]
    # and exported again, the imported run writes the same trajectories (its own ids aside)
    again = tmp_path / "again"
    assert cli("export", info["run_id"], "--format", "atif", "-o", again).rc == 0
    for a, b in zip(docs, _trajectories(again), strict=True):
        assert b["steps"] == [{k: v for k, v in s.items() if k != "metrics"} for s in a["steps"]]  # no calls kept
        totals = ("total_prompt_tokens", "total_completion_tokens", "total_steps")
        assert [b["final_metrics"][k] for k in totals] == [a["final_metrics"][k] for k in totals]


# -- Harbor's own layout -------------------------------------------------------------------------------
def _harbor_job(root: Path) -> Path:
    """A Harbor job folder as a terminal agent leaves it: trial folders with the agent's trajectory and the
    verifier's reward (reward.txt in one, reward.json and result.json in the other)."""
    t1 = {"schema_version": "ATIF-v1.5", "session_id": "s-1",
          "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": "openai/gpt-5"},
          "steps": [
              {"step_id": 1, "timestamp": "2025-11-01T10:00:00Z", "source": "system", "message": "You are in a shell."},
              {"step_id": 2, "source": "user", "message": "Create hello.txt"},
              {"step_id": 3, "source": "agent", "model_name": "openai/gpt-5", "message": "I will run echo.",
               "observation": {"results": [{"content": "$ echo hi > hello.txt\n$ "}]},
               "metrics": {"prompt_tokens": 500, "completion_tokens": 40, "cost_usd": 0.01}},
              {"step_id": 4, "source": "agent", "message": "Done.", "metrics": {"prompt_tokens": 560,
                                                                                   "completion_tokens": 5}}]}
    t2 = {"schema_version": "ATIF-v1.8", "trajectory_id": "t-2",
          "agent": {"name": "codex", "version": "0.9", "tool_definitions": [ADD]},
          "steps": [{"step_id": 1, "source": "user", "message": "Add 2 and 2"},
                    {"step_id": 2, "source": "agent", "message": "",
                     "tool_calls": [{"tool_call_id": "x1", "function_name": "add", "arguments": {"a": 2, "b": 2}}],
                     "observation": {"results": [{"source_call_id": "x1", "content": "4"}]}, "llm_call_count": 1},
                    {"step_id": 3, "source": "agent", "message": "4"}],
          "final_metrics": {"total_prompt_tokens": 900, "total_completion_tokens": 30}}
    job = root / "job"
    write_file(job / "hello__abc" / "agent" / "trajectory.json", json.dumps(t1))
    write_file(job / "hello__abc" / "verifier" / "reward.txt", "1\n")
    write_file(job / "add__def" / "agent" / "trajectory.json", json.dumps(t2))
    write_file(job / "add__def" / "verifier" / "reward.json", json.dumps({"reward": 0.5, "exact": 0.0}))
    write_file(job / "add__def" / "result.json", json.dumps({"task_name": "add-task", "trial_name": "add__def"}))
    write_file(job / "config.json", "{}")
    return job


def test_a_harbor_job_folder_imports_with_its_rewards(store_path: Path, tmp_path: Path) -> None:
    job = _harbor_job(tmp_path)
    with Store(store_path) as store:
        res = import_file(store, job, "atif")
    assert (res.rollouts, res.rewarded, res.problems) == (2, 2, [])
    add, hello = _rollouts(store_path, res.run_id)  # in path order: add__def, hello__abc
    assert hello["messages"] == [
        {"role": "system", "content": "You are in a shell."}, {"role": "user", "content": "Create hello.txt"},
        {"role": "assistant", "content": "I will run echo."}, {"role": "user", "content": "$ echo hi > hello.txt\n$ "},
        {"role": "assistant", "content": "Done."}]
    assert (hello["prompt_tokens"], hello["completion_tokens"], hello["reward"]) == (1060, 45, 1.0)
    assert hello["model"] == "openai/gpt-5" and hello["state"]["import"]["where"] == "hello__abc/agent/trajectory.json"
    assert add["messages"][1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "x1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'}}]}
    assert add["messages"][2] == {"role": "tool", "tool_call_id": "x1", "content": "4"}
    assert (add["prompt_tokens"], add["reward"], add["rewards"]) == (900, 0.5, {"exact": 0.0})
    assert add["state"]["import"]["group"] == "add-task" and add["state"]["import"]["tools"] == [ADD]
    # one trial folder, or its trajectory file alone, imports the same (its trial's reward with it)
    write_file(tmp_path / "one" / "agent" / "trajectory.json", (job / "hello__abc/agent/trajectory.json").read_text())
    write_file(tmp_path / "one" / "verifier" / "reward.txt", "0.5")
    with Store(store_path) as store:
        single = import_file(store, tmp_path / "one" / "agent" / "trajectory.json", "atif")
    assert (single.rollouts, single.mean_reward) == (1, 0.5)


def test_a_harbor_import_exports_as_valid_atif(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    res = cli("import", _harbor_job(tmp_path), "--format", "atif", "--json")
    assert res.rc == 0, res.stderr
    out = tmp_path / "out"
    assert cli("export", last_json(res.stdout)["run_id"], "--format", "atif", "-o", out).rc == 0
    docs = _trajectories(out)  # llm_call_count (v1.7) and the like are not carried: v1.6 holds the rest
    assert sorted((d["agent"]["name"], d["agent"]["version"]) for d in docs) == [("codex", "0.9"),
                                                                                   ("terminus-2", "2.0.0")]


def test_a_continued_trajectory_is_one_conversation(store_path: Path, tmp_path: Path) -> None:
    """Harbor's terminus-2 (linear history) goes on in trajectory.cont-N.json after it summarizes: the
    continuation's steps follow, less the ones it copied for context, and its running totals are the usage."""
    agent = {"name": "terminus-2", "version": "2"}
    first = {"schema_version": "ATIF-v1.5", "session_id": "s", "agent": agent,
             "continued_trajectory_ref": "trajectory.cont-1.json",
             "steps": [{"step_id": 1, "source": "user", "message": "task"},
                       {"step_id": 2, "source": "agent", "message": "a1", "metrics": {"prompt_tokens": 10}}],
             "final_metrics": {"total_prompt_tokens": 10, "total_completion_tokens": 1}}
    cont = {"schema_version": "ATIF-v1.5", "session_id": "s-cont-1", "agent": agent,
            "steps": [{"step_id": 1, "source": "user", "message": "task", "is_copied_context": True},
                      {"step_id": 2, "source": "agent", "message": "a1", "is_copied_context": True},
                      {"step_id": 3, "source": "user", "message": "go on"},
                      {"step_id": 4, "source": "agent", "message": "a2"}],
            "final_metrics": {"total_prompt_tokens": 30, "total_completion_tokens": 4}}
    trial = tmp_path / "job" / "t1"
    write_file(trial / "agent" / "trajectory.json", json.dumps(first))
    write_file(trial / "agent" / "trajectory.cont-1.json", json.dumps(cont))
    loop = tmp_path / "job" / "t2" / "agent" / "trajectory.json"
    write_file(loop, json.dumps(first | {"continued_trajectory_ref": "../../t1/agent/trajectory.json"}))
    with Store(store_path) as store:
        res = import_file(store, tmp_path / "job", "atif")
    assert res.rollouts == 1
    (r,) = _rollouts(store_path, res.run_id)
    assert [m["content"] for m in r["messages"]] == ["task", "a1", "go on", "a2"]
    assert (r["prompt_tokens"], r["completion_tokens"]) == (30, 4)
    assert [(p.where, p.reason) for p in res.problems] == [
        ("t2/agent/trajectory.json", "continued_trajectory_ref '../../t1/agent/trajectory.json' names no file beside it")]


def test_links_out_of_the_folder_and_special_files_are_not_read(store_path: Path, tmp_path: Path) -> None:
    outside = write_file(tmp_path / "secret" / "t.json", json.dumps(GOOD | {"session_id": "outside"}))
    write_file(tmp_path / "secret" / "reward.json", json.dumps({"reward": 9}))
    job = tmp_path / "job"
    write_file(job / "ok" / "agent" / "trajectory.json", json.dumps(GOOD))
    (job / "ok" / "verifier").mkdir()
    (job / "ok" / "verifier" / "reward.json").symlink_to(tmp_path / "secret" / "reward.json")
    (job / "link" / "agent").mkdir(parents=True)
    (job / "link" / "agent" / "trajectory.json").symlink_to(outside)
    (job / "linked-folder").symlink_to(tmp_path / "secret")
    (job / "fifo" / "agent").mkdir(parents=True)
    os.mkfifo(job / "fifo" / "agent" / "trajectory.json")
    with Store(store_path) as store:
        res = import_file(store, job, "atif")
    assert (res.rollouts, res.rewarded, res.problems) == (1, 0, [])
    (r,) = _rollouts(store_path, res.run_id)
    assert r["state"]["import"]["where"] == "ok/agent/trajectory.json" and r["reward"] is None


# -- bad input -----------------------------------------------------------------------------------------
GOOD = {"schema_version": "ATIF-v1.6", "session_id": "s", "agent": {"name": "a", "version": "1"},
        "steps": [{"step_id": 1, "source": "user", "message": "hi"}, {"step_id": 2, "source": "agent", "message": "yo"}]}


def _bad(change: Callable[[dict[str, Any]], Any]) -> str:
    doc = json.loads(json.dumps(GOOD))
    change(doc)
    return json.dumps(doc)


BAD = [  # (id, file text, fragments of the one line)
    ("not-json", "{oops", ["t.json", "not valid JSON"]),
    ("not-atif", json.dumps({"messages": []}), ["t.json", "schema_version is missing", "not an ATIF trajectory"]),
    ("version", _bad(lambda d: d.update(schema_version="ATIF-v2.0")), ["t.json", "schema_version", "'ATIF-v2.0'"]),
    ("no-source", _bad(lambda d: d["steps"][1].pop("source")), ["t.json", "steps[1].source is missing"]),
    ("no-message", _bad(lambda d: d["steps"][0].pop("message")), ["t.json", "steps[0].message is missing"]),
    ("no-agent", _bad(lambda d: d.pop("agent")), ["t.json", "agent is missing"]),
    ("agent-version", _bad(lambda d: d["agent"].pop("version")), ["t.json", "agent.version is missing"]),
    ("no-steps", _bad(lambda d: d.update(steps=[])), ["t.json", "steps is empty"]),
    ("step-order", _bad(lambda d: d["steps"][1].update(step_id=5)), ["t.json", "steps[1].step_id is 5"]),
    ("args", _bad(lambda d: d["steps"][1].update(tool_calls=[{"tool_call_id": "c", "function_name": "f"}])),
     ["t.json", "steps[1].tool_calls[0].arguments is missing"]),
    ("user-calls", _bad(lambda d: d["steps"][0].update(tool_calls=[])), ["t.json", "steps[0].tool_calls",
                                                                         "only an agent step"]),
    ("no-agent-step", _bad(lambda d: d["steps"].pop()), ["t.json", "no assistant turn"]),
]


@pytest.mark.parametrize(("text", "fragments"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_one_clear_line_and_nothing_is_written(cli: Callable[..., CliResult], tmp_path: Path,
                                                            store_path: Path, text: str, fragments: list[str]) -> None:
    path = write_file(tmp_path / "in" / "t.json", text)
    assert_user_error(cli("import", path, "--format", "atif"), *fragments)
    if store_path.exists():
        assert query(store_path, "SELECT COUNT(*) FROM run") == [(0,)]
        assert query(store_path, "SELECT COUNT(*) FROM rollout") == [(0,)]


def test_folders_without_trajectories_and_bad_files_among_good_ones(cli: Callable[..., CliResult], tmp_path: Path,
                                                                     store_path: Path) -> None:
    write_file(tmp_path / "empty" / "notes.txt", "hi")
    assert_user_error(cli("import", tmp_path / "empty", "--format", "atif"), "holds no ATIF trajectories")
    folder = tmp_path / "flat"
    write_file(folder / "a.json", json.dumps(GOOD))
    write_file(folder / "b.json", BAD[3][1])
    res = cli("import", folder, "--format", "atif", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["rollouts"] == 1 and [(p["where"], p["reason"]) for p in out["problems"]] == [
        ("b.json", "steps[1].source is missing ('system', 'user' or 'agent')")]
    job = _harbor_job(tmp_path)  # a trial whose verifier wrote no number: that trial is reported, the other kept
    write_file(job / "hello__abc" / "verifier" / "reward.txt", "passed")
    res = cli("import", job, "--format", "atif")
    assert res.rc == 0, res.stderr
    assert "imported 1 conversations" in res.stdout
    assert "hello__abc/agent/trajectory.json: its trial's verifier/reward.txt does not hold a finite number " \
           "(got 'passed')" in res.stdout


def test_export_refuses_what_it_cannot_fill(cli: Callable[..., CliResult], model_run: Path, tmp_path: Path) -> None:
    assert_user_error(cli("export", RUN, "--format", "atif"), "-o FOLDER")
    write_file(tmp_path / "full" / "keep.txt", "mine")
    assert_user_error(cli("export", RUN, "--format", "atif", "-o", tmp_path / "full"), "not empty")
    assert_user_error(cli("export", RUN, "--format", "atif", "-o", tmp_path / "full" / "keep.txt"), "is a file")
    assert_user_error(cli("export", RUN, "--format", "atif", "-o", tmp_path / "no" / "such"), "does not exist")
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["keep.txt"]
    assert not (tmp_path / "no").exists()


# -- any trajectory -------------------------------------------------------------------------------------
RICH = {"schema_version": "ATIF-v1.6", "session_id": "s", "agent": {"name": "a", "version": "1", "model_name": "m",
                                                                    "tool_definitions": [ADD]},
        "steps": [{"step_id": 1, "source": "system", "message": "sys"},
                  {"step_id": 2, "source": "user", "message": [{"type": "text", "text": "hi"}, {
                      "type": "image", "source": {"media_type": "image/png", "path": "a.png"}}]},
                  {"step_id": 3, "source": "agent", "message": "", "reasoning_content": "r",
                   "tool_calls": [{"tool_call_id": "c", "function_name": "f", "arguments": {"x": [1, {"y": 2}]}}],
                   "observation": {"results": [{"source_call_id": "c", "content": "out"}, {"content": None}]},
                   "metrics": {"prompt_tokens": 3, "completion_tokens": 4},
                   "extra": {"workbench": {"message": {"role": "assistant", "content": "kept"}, "results": [None]}}},
                  {"step_id": 4, "source": "agent", "message": "done"}],
        "final_metrics": {"total_prompt_tokens": 5, "total_cost_usd": 0.1},
        "extra": {"workbench": {"reward": 1, "rewards": {"a": 1}, "task_id": "t", "info": {}, "duration_s": 2}}}
ODD_VALUES: list[Any] = [None, 0, -1, 1.5, True, "", "x", [], [1], {}, {"a": 1}, [{}], 10**30, "ATIF-v1.6"]


def _places(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _places(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _places(v, (*path, i))
    return out


def test_every_mutation_of_a_trajectory_imports_or_names_its_field() -> None:
    """Each value of a valid trajectory swapped for an odd one (or its key removed) reads as a
    conversation that can be stored, or as one reason naming what is wrong; never as another error."""
    from workbench.records.atif import Bad
    from workbench.runs.import_atif import trajectory_conversation
    from workbench.runs.import_formats import check_messages

    assert not isinstance(check_messages(trajectory_conversation(RICH, "t").messages), str)
    outcomes = {"read": 0, "refused": 0}
    for place in _places(RICH)[1:]:
        for value in [*ODD_VALUES, "<removed>"]:
            doc = json.loads(json.dumps(RICH))
            holder = doc
            for key in place[:-1]:
                holder = holder[key]
            if value == "<removed>":
                holder.pop(place[-1]) if isinstance(holder, dict) else holder.__delitem__(place[-1])
            else:
                holder[place[-1]] = value
            try:
                c = trajectory_conversation(doc, "t")
            except Bad as e:
                assert str(e) and "\n" not in str(e)
                outcomes["refused"] += 1
                continue
            assert not isinstance(check_messages(c.messages), str), (place, value)
            json.dumps([c.messages, c.metadata, c.tools, c.info, c.answer])  # storable as JSON
            outcomes["read"] += 1
    assert outcomes["read"] > 100 and outcomes["refused"] > 100, outcomes


def _random_message(rng: Any, calls: list[str]) -> dict[str, Any]:
    """One chat message of the kinds stored rollouts hold (``calls``: ids of the last turn's tool calls)."""
    content = rng.choice([None, "", "text", "[b]markup[/b]", [{"type": "text", "text": "part"}],
                          [{"type": "image_url", "image_url": {"url": "data:image/webp;base64,AAAA"}}],
                          [{"type": "image_url", "image_url": {"url": "x.bmp", "detail": "low"}}],
                          [{"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}],
                          [{"type": "audio", "source": {"media_type": "audio/wav", "path": "a.wav"}}]])
    role = rng.choice(["system", "developer", "user", "assistant", "assistant", "tool", "tool"])
    m: dict[str, Any] = {"role": role, "content": content}
    if role == "assistant" and rng.random() < 0.6:
        m["tool_calls"] = [_call(rng.choice([f"c{rng.randrange(99)}", None]) or f"c{rng.randrange(99)}", "f",
                                 rng.choice(['{"a": 1}', '{"a":1}', "", "[1]", "nope", {"b": 2}, None]))
                           for _ in range(rng.randrange(1, 3))]
        calls[:] = [tc["id"] for tc in m["tool_calls"]]
    if role == "assistant" and rng.random() < 0.3:
        m["reasoning_content"] = "think"
    if role == "tool":
        m["tool_call_id"] = rng.choice([*calls, "stray"]) if calls else "stray"
        m["content"] = content if content is not None else "r"
    if rng.random() < 0.1:
        m["name"] = "n"
    return m


@pytest.mark.parametrize("seed", range(40))
def test_any_stored_conversation_exports_as_valid_atif_and_reads_back(seed: int) -> None:
    import random

    from workbench.records.atif import step_messages, trajectory_steps

    rng = random.Random(seed)
    calls: list[str] = []
    messages = [_random_message(rng, calls) for _ in range(rng.randrange(1, 12))]
    steps = trajectory_steps(messages)
    Trajectory.model_validate({"schema_version": "ATIF-v1.6", "session_id": "s", "agent": {"name": "a", "version": "1"},
                               "steps": steps})
    read = [m for i, step in enumerate(steps) for m in step_messages(step, i)[0]]
    assert read == messages
