"""The SFT export's ``tools`` column holds the tool definitions each rollout was offered, whether or not
its model returned tokens (a rollout of an API model has no token trace): ``workbench eval`` of a tool
environment against the real mock server, ``workbench export`` as a subprocess, and the file loaded
with ``datasets`` together with the export of a run without tools.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import last_json, query

# slow: a CLI eval and export, the file loaded with datasets
pytestmark = pytest.mark.slow


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


# (case, mock server arguments): a model that calls a tool and then answers, and one that answers at once
# (offered the tools all the same); neither returns token ids, so no rollout has a token trace
CASES = [
    ("calls-a-tool", {"script": [{"tool_calls": [_call("c1", "search", query="refund policy")]},
                                 "The answer is 30 days."]}, ("--by-turn",)),
    ("answers-at-once", {"script": ["The answer is 30 days."]}, ()),
]


@pytest.mark.parametrize(("case", "server_args", "flags"), CASES, ids=[c for c, _, _ in CASES])
def test_an_sft_row_without_a_token_trace_carries_the_tools_its_rollout_was_offered(
        cli: Callable[..., Any], mock_server: Callable[..., Any], tmp_path: Path, store_path: Path,
        case: str, server_args: dict[str, Any], flags: tuple[str, ...]) -> None:
    datasets = pytest.importorskip("datasets")
    server = mock_server("script", *flags, **server_args)
    res = cli("eval", "doc_search", "-m", "mock-model", "--base-url", server.base_url, "-n", "1", "--json")
    assert res.rc == 0, res.stderr
    run = last_json(res.stdout)["run_id"]
    assert query(store_path, "SELECT COUNT(*) FROM trace")[0][0] == 0  # no tokens: no trace to read tools from
    bodies = server.bodies()
    offered = [b["tools"] for b in bodies if b.get("tools")][-1]  # what the server was actually sent
    assert [t["function"]["name"] for t in offered] == ["search", "read"]
    if case == "calls-a-tool":
        assert len(bodies) >= 2 and any(m.get("role") == "tool" for m in bodies[-1]["messages"])

    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"q{i}"},
                                                      {"role": "assistant", "content": f"a{i}"}]}) + "\n"
                             for i in range(2)))
    plain_run = last_json(cli("import", plain, "--format", "openai-jsonl", "--json").stdout)["run_id"]
    files = []
    for r in (run, plain_run):
        path = tmp_path / f"{r}.jsonl"
        exp = cli("export", r, "--format", "jsonl", "-o", path)
        assert exp.rc == 0, exp.stderr
        files.append(str(path))
    [row] = [json.loads(line) for line in Path(files[0]).read_text().splitlines()]
    assert json.loads(row["tools"]) == offered
    assert json.loads(row["metadata"])["env"] == "doc_search"

    for order in (files, files[::-1]):  # one schema: the files load together whichever comes first
        ds = datasets.load_dataset("json", data_files=order, split="train", cache_dir=str(tmp_path / "hf"))
        assert len(ds) == 3 and ds.features["tools"] == datasets.Value("string")
        by_run = {json.loads(r["metadata"])["run_id"]: r for r in ds}
        assert json.loads(by_run[run]["tools"]) == offered
        assert json.loads(by_run[plain_run]["tools"]) == []
