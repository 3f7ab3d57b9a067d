"""What Workbench prints of IMPORTED data, against hostile text: escape sequences (a clipboard write, a
screen clear, a window title) and Rich markup inside an OpenAI chat JSONL's messages, tool calls,
metadata, reward names and model name. ``workbench import`` and the commands that print stored runs
run as subprocesses on a real store; each prints the text as text (control characters made visible),
no raw escape byte, and exits 0 with the store unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import cli_environment, last_json, query, run_workbench, write_file
from tests.security.test_terminal_hostile import HOSTILE, MODEL, MODEL_SHOWN, SHOWN

TOOL = "look" + HOSTILE[:3]  # a tool name with markup: "look[/x"
ROWS = [
    {"id": "chat-" + HOSTILE, "rewards": {"graded" + HOSTILE: 1.0},
     "metadata": {"answer": "answer " + HOSTILE, "info": {"note" + HOSTILE: "info " + HOSTILE}, "origin": HOSTILE},
     "tools": [{"type": "function", "function": {"name": TOOL, "description": "tool " + HOSTILE,
                                                  "parameters": {"type": "object", "properties": {}}}}],
     "messages": [
         {"role": "system", "content": "system " + HOSTILE},
         {"role": "user", "content": "say " + HOSTILE},
         {"role": "assistant", "content": "calling " + HOSTILE,
          "tool_calls": [{"id": "c1", "type": "function",
                          "function": {"name": TOOL, "arguments": json.dumps({"q": HOSTILE})}}]},
         {"role": "tool", "tool_call_id": "c1", "content": "found " + HOSTILE},
         {"role": "assistant", "content": "the answer " + HOSTILE},
     ]},
    {"reward": 0.5, "metadata": {"answer": HOSTILE},
     "messages": [{"role": "user", "content": [{"type": "text", "text": "part " + HOSTILE}]},
                  {"role": "assistant", "content": "plain " + HOSTILE}]},
]


ROW_MODEL = "row[/x]\x1b]0;t\x07"  # each conversation's own model
ROW_MODEL_SHOWN = "row[/x]␛]0;t␇"


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], str, str]:
    """A store holding two imports of the hostile chats: one keeping each conversation's model, one named
    with ``--model``; (the CLI's environment, the first run's id, the second's)."""
    home = tmp_path_factory.mktemp("hostile-import")
    env = cli_environment(home, home / "store.db")
    runs = []
    for name, extra in (("chats.jsonl", []), ("named.jsonl", ["--model", MODEL])):
        rows = [{**r, "model": ROW_MODEL, **({"id": f"{name}-{i}"} if i else {})} for i, r in enumerate(ROWS)]
        path = write_file(home / name, "".join(json.dumps(r) + "\n" for r in rows))
        res = run_workbench(["import", path, "--format", "openai-jsonl", *extra, "--json"], env)
        assert res.rc == 0 and "\x1b" not in res.stdout + res.stderr, res.stderr
        out = last_json(res.stdout)
        assert out["rollouts"] == len(ROWS) and out["skipped"] == 0, out
        runs.append(out["run_id"])
    return env, runs[0], runs[1]


#: (command, what its output must show): every command that prints an imported run and its rollouts.
SHOWS: list[tuple[list[str], list[str]]] = [
    (["show", "{run}"], ["graded" + SHOWN]),
    (["show", "{named}"], [MODEL_SHOWN, "graded" + SHOWN]),
    (["show", "{run}.0.0"], [ROW_MODEL_SHOWN, "system " + SHOWN, "say " + SHOWN, "calling " + SHOWN,
                             "found " + SHOWN, "the answer " + SHOWN]),
    (["show", "{named}.0.0", "--full"], [MODEL_SHOWN, "say " + SHOWN, "the answer " + SHOWN]),
    (["show", "{run}.1.0"], ["part " + SHOWN, "plain " + SHOWN]),
    (["runs"], [MODEL_SHOWN]),
    (["runs", "{named}"], [MODEL_SHOWN]),
    (["runs", "{run}"], ["openai-jsonl"]),
]


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
@pytest.mark.parametrize(("args", "shown"), SHOWS, ids=[" ".join(a[:2]) + f" {i}" for i, (a, _) in enumerate(SHOWS)])
def test_imported_text_is_printed_as_text(imported: tuple[dict[str, str], str, str], args: list[str],
                                          shown: list[str], terminal: bool) -> None:
    env, run, named = imported
    if terminal:  # Rich writes its own styles then: the data's sequences must still not reach the terminal
        env = {k: v for k, v in env.items() if k != "NO_COLOR"} | {"FORCE_COLOR": "1", "TERM": "xterm-256color"}
    db = Path(env["WORKBENCH_DB"])
    before = query(db, "SELECT count(*), total(reward) FROM rollout")
    res = run_workbench([x.format(run=run, named=named) for x in args], env)
    assert res.rc == 0 and "Traceback" not in res.stderr, res.stderr
    out = res.stdout
    for raw in ("\x1b]", "\x1b[2J", "\x07"):
        assert raw not in out + res.stderr, f"{raw!r} reached the terminal"
    if not terminal:
        assert "\x1b" not in out + res.stderr, "an escape byte reached the terminal"
    for text in shown:
        assert text in out, f"{text!r} is not shown as it is in:\n{out[:3000]}"
    assert query(db, "SELECT count(*), total(reward) FROM rollout") == before
