"""``workbench mcp --http`` as a hostile local process meets it: the real command as a subprocess, the
``mcp`` SDK's own client over streamable HTTP. Without the bearer token nothing is served (401); with it,
the tools that load code take only a discovered environment's name, never a path."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.helpers import _readline, stop_process, wait_for, workbench_argv, write_file

# slow: a workbench mcp --http process per case (the MCP face in the fast lane: tests/workbench/test_mcp_server.py)
pytestmark = pytest.mark.slow

CHOSEN = "a-token-chosen-by-the-user-0123456789"
#: Code a hostile process writes and asks the server to load: if it ever runs, the marker file appears.
EVIL = """
from pathlib import Path
Path(__file__).with_name("ran").write_text("the server ran this file")

def load_environment():
    raise SystemExit("never")
"""


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@contextlib.contextmanager
def http_server(env: dict[str, str], cwd: Path, port: int) -> Iterator[str]:
    """``workbench mcp --http PORT`` until it says where it listens; yields that first stderr line."""
    proc = subprocess.Popen([*workbench_argv(), "mcp", "--http", str(port)], env=env, cwd=cwd,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = _readline(proc.stderr, 90)
        assert "streamable HTTP on" in line, f"the server did not start: {line!r} {proc.poll()}"
        wait_for(lambda: listening(port) or proc.poll() is not None, 60, "the server to listen")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        yield line
    finally:
        stop_process(proc)


@contextlib.asynccontextmanager
async def session(port: int, headers: dict[str, str], statuses: list[int] | None = None) -> AsyncIterator[ClientSession]:
    """A session of the SDK's client; ``statuses`` collects the HTTP status of every response it gets."""

    async def record(response: httpx2.Response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    async with httpx2.AsyncClient(headers=headers, event_hooks={"response": [record]}) as http, \
            streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (read, write), \
            ClientSession(read, write) as s:
        await s.initialize()
        yield s


def mcp_errors(exc: BaseException) -> list[MCPError]:
    """Every ``MCPError`` inside ``exc`` (an exception group or not)."""
    if isinstance(exc, BaseExceptionGroup):
        return [found for e in exc.exceptions for found in mcp_errors(e)]
    return [exc] if isinstance(exc, MCPError) else []


def token_of(line: str) -> str:
    return line.split("bearer token ", 1)[1].split()[0]


#: A keyring backend keeping its entries in a JSON file (the machine's keyring, for a subprocess).
FILE_KEYRING = """
import json, os
import keyring.backend

class FileKeyring(keyring.backend.KeyringBackend):
    priority = 1
    path = os.environ["TEST_KEYRING_FILE"]

    def _all(self):
        return json.load(open(self.path)) if os.path.exists(self.path) else {}

    def get_password(self, service, username):
        return self._all().get(f"{service}/{username}")

    def set_password(self, service, username, password):
        entries = self._all()
        entries[f"{service}/{username}"] = password
        json.dump(entries, open(self.path, "w"))

    def delete_password(self, service, username):
        entries = self._all()
        entries.pop(f"{service}/{username}")
        json.dump(entries, open(self.path, "w"))
"""


@pytest.mark.parametrize("source", ["generated", "env", "keyring"])
async def test_http_needs_the_bearer_token(cli_env: dict[str, str], tmp_path: Path, closed_port: int,
                                           source: str) -> None:
    env = {**cli_env, "WORKBENCH_MCP_TOKEN": CHOSEN} if source == "env" else dict(cli_env)
    if source == "keyring":
        write_file(tmp_path / "kr" / "file_keyring.py", FILE_KEYRING)
        (tmp_path / "keyring.json").write_text(json.dumps({"workbench/mcp": CHOSEN}))
        env.update(PYTHONPATH=str(tmp_path / "kr"), PYTHON_KEYRING_BACKEND="file_keyring.FileKeyring",
                   TEST_KEYRING_FILE=str(tmp_path / "keyring.json"))
    with http_server(env, tmp_path, closed_port) as line:
        token = token_of(line) if source == "generated" else CHOSEN
        if source != "generated":
            assert CHOSEN not in line and f"bearer token from {'$WORKBENCH_MCP_TOKEN' if source == 'env' else 'the keyring'}" \
                in line, f"a token the user chose is never printed: {line}"
        refused: list[tuple[str, dict[str, str]]] = [
            ("no token", {}),
            ("a wrong token", {"Authorization": "Bearer " + token[:-1] + ("x" if token[-1] != "x" else "y")}),
            ("a prefix of the token", {"Authorization": "Bearer " + token[:8]}),
            ("the token under another scheme", {"Authorization": "Basic " + token}),
            ("the token without a scheme", {"Authorization": token}),
        ]
        for what, headers in refused:
            statuses: list[int] = []
            with pytest.raises(BaseException) as caught:  # noqa: PT011 - the SDK may raise an exception group
                async with session(closed_port, headers, statuses):
                    pass
            assert mcp_errors(caught.value), f"{what}: {caught.value!r}"
            assert statuses and set(statuses) == {401}, f"{what}: {statuses}"
        raw = httpx.post(f"http://127.0.0.1:{closed_port}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert raw.status_code == 401 and raw.headers["www-authenticate"].startswith("Bearer")
        async with session(closed_port, {"Authorization": f"Bearer {token}"}) as s:
            res = await s.call_tool("list_environments", {})
            assert not res.is_error and "arithmetic" in {e["name"] for e in res.structured_content["envs"]}


def test_a_short_token_is_refused(cli_env: dict[str, str], tmp_path: Path, closed_port: int) -> None:
    p = subprocess.run([*workbench_argv(), "mcp", "--http", str(closed_port)], cwd=tmp_path, capture_output=True,
                       env={**cli_env, "WORKBENCH_MCP_TOKEN": "short"}, text=True, timeout=120)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode != 0 and len(lines) == 1, p.stderr
    assert "$WORKBENCH_MCP_TOKEN must be at least 16" in lines[0]


# (what, tool, arguments): every tool that loads an environment's code, given something other than a name.
PATHS: list[tuple[str, str, dict[str, Any]]] = [
    ("validate a .py path", "validate_environment", {"env": "{evil}"}),
    ("validate a package folder", "validate_environment", {"env": "{pkg}"}),
    ("validate a relative path", "validate_environment", {"env": "./evil.py"}),
    ("a name a local folder shadows", "validate_environment", {"env": "arithmetic"}),
    ("run_eval of a path", "run_eval", {"env": "{evil}", "base_url": "http://127.0.0.1:9/v1", "model": "m", "n": 1}),
    ("rescore of a path", "rescore", {"env": "{evil}"}),
    ("an installed module that is no environment", "validate_environment", {"env": "json"}),
    ("plan_launch of a path", "plan_launch", {"env": "{evil}"}),
    ("plan_launch with a config file", "plan_launch", {"env": "wordle", "config": "{toml}"}),
    ("plan_launch naming a path in overrides", "plan_launch", {"env": "wordle",
                                                               "overrides": {"env.name": "{evil}"}}),
]


async def test_http_tools_take_only_discovered_names(cli_env: dict[str, str], tmp_path: Path,
                                                     closed_port: int) -> None:
    evil = write_file(tmp_path / "evil.py", EVIL)
    pkg = tmp_path / "evilpkg"
    write_file(pkg / "__init__.py", EVIL)
    toml = write_file(tmp_path / "run.toml", '[env]\nname = "' + str(evil) + '"\n')
    write_file(tmp_path / "arithmetic" / "__init__.py", EVIL)  # shadows the bundled name in the server's folder
    fill = {"{evil}": str(evil), "{pkg}": str(pkg), "{toml}": str(toml)}

    def filled(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: filled(v) for k, v in value.items()}
        return fill.get(value, value) if isinstance(value, str) else value

    with http_server(cli_env, tmp_path, closed_port) as line:
        async with session(closed_port, {"Authorization": f"Bearer {token_of(line)}"}) as s:
            for what, tool, args in PATHS:
                res = await s.call_tool(tool, filled(args))
                text = res.content[0].text  # type: ignore[union-attr]
                assert res.is_error, f"{what}: served {text[:300]}"
                assert "over HTTP" in text and "\n" not in text, f"{what}: {text}"
            for marker in (tmp_path / "ran", pkg / "ran"):
                assert not marker.exists(), "a file a client named was executed"
            ok = await s.call_tool("validate_environment", {"env": "wordle", "sample": 2})
            assert not ok.is_error, ok.content
