"""Gateway keys: made once, printed once, kept as a hash; a running gateway's key ring follows the file."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import assert_user_error, last_json
from workbench.errors import ConfigError
from workbench.gateway.keys import KeyRing, add_key, load_keys, revoke


def test_a_key_is_printed_once_and_only_its_hash_is_kept(cli: Callable[..., Any], cli_env: dict[str, str]) -> None:
    made = cli("gateway", "keys", "add", "support-bot", "--json")
    assert made.rc == 0, made.stderr
    out = last_json(made.stdout)
    key, path = out["key"], Path(out["path"])
    assert key.startswith("wbg_") and out["app"] == "support-bot" and out["active"] is True
    assert key not in path.read_text() and stat.S_IMODE(path.stat().st_mode) == 0o600
    listed = cli("gateway", "keys", "list", "--json")
    assert listed.rc == 0 and key not in listed.stdout
    (row,) = last_json(listed.stdout)["keys"]
    assert row == {"app": "support-bot", "id": out["id"], "created_at": out["created_at"], "revoked_at": None,
                   "active": True}
    table = cli("gateway", "keys", "list")
    assert "support-bot" in table.stdout and "active" in table.stdout and key not in table.stdout
    gone = cli("gateway", "keys", "revoke", "support-bot", "--json")
    assert gone.rc == 0 and [k["active"] for k in last_json(gone.stdout)["revoked"]] == [False]
    assert last_json(cli("gateway", "keys", "list", "--json").stdout)["keys"][0]["active"] is False


#: (the command's arguments, what its one line says)
BAD = [
    (("keys", "add", "bad/name"), "app name 'bad/name'"),
    (("keys", "add", "white space"), "app name 'white space'"),
    (("keys", "revoke", "nobody"), "no active gateway key has the id or app 'nobody'"),
]


@pytest.mark.parametrize(("args", "fragment"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_and_writes_nothing(cli: Callable[..., Any], args: tuple[str, ...],
                                                  fragment: str) -> None:
    before = last_json(cli("gateway", "keys", "list", "--json").stdout)
    assert_user_error(cli("gateway", *args), fragment)
    assert last_json(cli("gateway", "keys", "list", "--json").stdout) == before


def test_a_broken_keys_file_is_one_line_naming_it(cli: Callable[..., Any], cli_env: dict[str, str]) -> None:
    path = Path(last_json(cli("gateway", "keys", "list", "--json").stdout)["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json")
    assert_user_error(cli("gateway", "keys", "list"), str(path), "not a gateway keys file")


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    return tmp_path / "keys.json"


def test_the_ring_accepts_an_active_key_only(keys_file: Path) -> None:
    key, record = add_key("app-a", keys_file)
    other, _ = add_key("app-b", keys_file)
    ring = KeyRing(keys_file)
    forged = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    cases = {key: "app-a", other: "app-b", forged: None, "": None, None: None, "sk-provider-key": None,
             f"wbg_00000000_{'x' * 43}": None, key + "x" * 30: None}
    for given, app in cases.items():
        assert ring.app_of(given) == app, given
    revoke(record.id, keys_file)
    assert ring.app_of(key) is None and ring.app_of(other) == "app-b"  # the file changed: read again


def test_revoking_an_app_revokes_each_of_its_keys(keys_file: Path) -> None:
    first, _ = add_key("app", keys_file)
    second, _ = add_key("app", keys_file)
    assert len(revoke("app", keys_file)) == 2
    ring = KeyRing(keys_file)
    assert ring.app_of(first) is None and ring.app_of(second) is None
    with pytest.raises(ConfigError, match="no active gateway key"):
        revoke("app", keys_file)
    assert [k.active for k in load_keys(keys_file)] == [False, False]


def test_keys_file_is_json_with_no_key_in_it(keys_file: Path) -> None:
    key, _ = add_key("app", keys_file)
    data = json.loads(keys_file.read_text())
    assert set(data["keys"][0]) == {"app", "id", "sha256", "created_at", "revoked_at"}
    assert key not in keys_file.read_text() and os.stat(keys_file).st_mode & 0o077 == 0
