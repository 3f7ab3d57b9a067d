"""A hand-edited environment override with bad fields ends in one line that names the file and the field,
and changes nothing: the file stays as it was for the user to fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import assert_user_error, cli_environment, run_workbench

CASES = [
    ("created_at a word", {"system_prompt": "x", "created_at": "yesterday"}, "created_at"),
    ("created_at a list", {"system_prompt": "x", "created_at": [1]}, "created_at"),
    ("origin an object", {"system_prompt": "x", "origin": {"a": 1}}, "origin"),
    ("base_version a number", {"system_prompt": "x", "base_version": 7}, "base_version"),
    ("system_prompt a number", {"system_prompt": 3}, "system_prompt"),
    ("no system_prompt", {"origin": "optimize r1"}, "system_prompt"),
    ("a list, not an object", [1, 2], "system_prompt"),
    ("not JSON", "{nope", "cannot read"),
]


@pytest.mark.parametrize(("body", "field"), [(b, f) for _, b, f in CASES], ids=[c[0] for c in CASES])
def test_a_malformed_override_names_its_file_and_field(tmp_path: Path, body: object, field: str) -> None:
    env = cli_environment(tmp_path, tmp_path / "wb.db")
    path = Path(env["XDG_CONFIG_HOME"]) / "workbench" / "overrides" / "arithmetic.json"
    path.parent.mkdir(parents=True)
    text = body if isinstance(body, str) else json.dumps(body)
    path.write_text(text)
    line = assert_user_error(run_workbench(["validate", "arithmetic", "--no-probe"], env), str(path), field)
    assert "fix" in line
    assert path.read_text() == text


def test_a_well_formed_override_still_applies(tmp_path: Path) -> None:
    env = cli_environment(tmp_path, tmp_path / "wb.db")
    path = Path(env["XDG_CONFIG_HOME"]) / "workbench" / "overrides" / "arithmetic.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"system_prompt": "Answer with the number only.", "created_at": 17000}))
    res = run_workbench(["envs", "--json"], env)
    assert res.rc == 0, res.stderr
    (arith,) = [e for e in json.loads(res.stdout.splitlines()[-1])["envs"] if e["name"] == "arithmetic"]
    assert arith["override"]["system_prompt"] == "Answer with the number only."
