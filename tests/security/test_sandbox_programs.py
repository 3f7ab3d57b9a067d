"""Real agent programs and MCP servers in wb.Local()'s sandbox, as a user points at them on their machine:
npm shims (symlinks into a package), console scripts of a virtual environment, the published Node MCP
servers installed with npm, a pip-installed MCP server; memory bounded by what programs hold resident,
not by what they reserve; and nothing mounted that the user did not bind or the program does not need.

Every case is a real `workbench eval` subprocess against the mock model, read back from the SQLite store.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import last_json

# slow: installs npm and pip packages and runs real agent programs and MCP servers in the sandbox
pytestmark = pytest.mark.slow

ENV = '''
import workbench as wb

def load_environment(argv=("true",), binds=(), memory=None, mcp=None, mcp_env=None):
    rt = wb.Local(memory=memory) if memory else wb.Local()
    if mcp:
        tools = [wb.MCPTools(command=mcp, env=mcp_env or {}, per_rollout=True, sandboxed=True, name="srv")]
        harness = wb.ToolLoop(tools=tools, max_turns=4)
    else:
        harness = wb.Program(list(argv), binds=list(binds), timeout=120)
    tasks = wb.TaskSet.from_records([{"prompt": "go", "answer": "1"}], name="t")
    return wb.Environment(name="sbprog", tasks=tasks, harness=harness, rubric=wb.Rubric(), runtime=rt)
'''

NPM_PACKAGES = ["@modelcontextprotocol/server-memory@2025.8.4", "@modelcontextprotocol/server-filesystem@2025.8.21"]


def _need(tool: str) -> str:
    """A system tool the setup installs (scripts/system_setup.sh): missing is a failure where it could have."""
    found = shutil.which(tool)
    if found:
        return found
    msg = f"{tool} is not installed (scripts/system_setup.sh installs it as root with apt)"
    if os.geteuid() == 0 and shutil.which("apt-get"):
        pytest.fail(msg)
    pytest.skip(msg)


def _cgroup() -> bool:
    from workbench_local.sandbox.cgroup import Hierarchy, detect

    return isinstance(detect(), Hierarchy)


@pytest.fixture(scope="session")
def node_modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two published Node MCP servers, installed with npm once per session."""
    npm = _need("npm")
    _need("node")
    prefix = tmp_path_factory.mktemp("npm")
    p = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", str(prefix),
                        *NPM_PACKAGES], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return prefix / "node_modules"


@pytest.fixture(scope="session")
def sqlite_server(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``mcp-server-sqlite``, pip-installed into a virtual environment of its own once per session: a console
    script whose ``#!`` line names that environment's Python."""
    venv = tmp_path_factory.mktemp("sqlite-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    p = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "mcp-server-sqlite==2025.4.25",
                        "mcp<2"],  # the server predates the SDK's 2.0
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    return venv / "bin" / "mcp-server-sqlite"


def _npm_shim(root: Path) -> Path:
    """A project's ``node_modules`` as npm lays it out: ``.bin/agent`` links to ``../agent-pkg/bin/cli.js``,
    which requires a sibling package."""
    nm = root / "node_modules"
    (nm / ".bin").mkdir(parents=True)
    (nm / "agent-pkg" / "bin").mkdir(parents=True)
    (nm / "left-pad").mkdir()
    (nm / "left-pad" / "index.js").write_text("module.exports = (s) => '[' + s + ']';\n")
    cli = nm / "agent-pkg" / "bin" / "cli.js"
    cli.write_text("#!/usr/bin/env node\nconsole.log('npm shim ' + require('left-pad')('ran'));\n")
    cli.chmod(0o755)
    (nm / ".bin" / "agent").symlink_to("../agent-pkg/bin/cli.js")
    return nm / ".bin" / "agent"


def _native_shim(root: Path) -> Path:
    """``node_modules/.bin/claude`` -> ``../@anthropic-ai/claude-code/bin/claude.exe``: an executable that
    reads its own package's files."""
    pkg = root / "node_modules" / "@anthropic-ai" / "claude-code"
    (pkg / "bin").mkdir(parents=True)
    (root / "node_modules" / ".bin").mkdir()
    (pkg / "package.json").write_text('{"name": "@anthropic-ai/claude-code", "version": "9.9.9"}\n')
    exe = pkg / "bin" / "claude.exe"
    exe.write_text('#!/bin/sh\nhere=$(dirname "$(readlink -f "$0")")\ncat "$here/../package.json"\n')
    exe.chmod(0o755)
    link = root / "node_modules" / ".bin" / "claude"
    link.symlink_to("../@anthropic-ai/claude-code/bin/claude.exe")
    return link


def _console_script(root: Path) -> Path:
    """A console script as pip writes one: ``VENV/bin/hello`` with ``#!VENV/bin/python``, importing its
    module from the environment's site-packages."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "hello_cli.py").write_text("import sys\ndef main():\n    print('console script from', sys.prefix)\n")
    script = venv / "bin" / "hello"
    script.write_text(f"#!{venv}/bin/python\nimport sys\nfrom hello_cli import main\n"
                      "if __name__ == '__main__':\n    sys.exit(main())\n")
    script.chmod(0o755)
    return script


def _rollout(store: Path) -> dict[str, Any]:
    con = sqlite3.connect(store)
    row = con.execute("SELECT pk, status, messages, state FROM rollout").fetchone()
    assert row is not None, "the run stored no rollout"
    errors = [f"{k}: {m}" for k, m in con.execute("SELECT kind, message FROM rollout_error WHERE rollout_pk = ?",
                                                    (row[0],))]
    con.close()
    return {"status": row[1], "messages": json.loads(row[2]), "state": json.loads(row[3]), "errors": errors}


def _eval(cli: Callable[..., Any], write_env: Callable[..., Path], mock: Any, store: Path, args: dict[str, Any],
          env: dict[str, str] | None = None) -> tuple[Any, dict[str, Any]]:
    path = write_env(ENV, "sbprog.py")
    res = cli("eval", path, "--base-url", mock.base_url, "-m", "mock-model", "--json", "-a", json.dumps(args),
              env=env, timeout=300)
    assert "Traceback" not in res.stderr, res.stderr
    assert res.rc in (0, 2), res.stderr  # 2: the rollout failed (asserted by the case)
    assert last_json(res.stdout)["rollouts"] == 1, res.stderr
    return res, _rollout(store)


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


# -- programs: what is mounted ---------------------------------------------------------------------
def _secret_dir(tmp: Path) -> Path:
    d = tmp / "host-folder"
    d.mkdir()
    (d / "host-secret.txt").write_text("host only")
    return d


#: (case, args(tmp) -> eval arguments, expected status, what stdout must show, what it must not)
PROGRAMS: list[tuple[str, Callable[[Path], dict[str, Any]], str, str, str]] = [
    ("npm-shim-to-a-node-script", lambda t: {"argv": [str(_npm_shim(t))]}, "ok", "npm shim [ran]", ""),
    ("npm-shim-to-a-package-executable", lambda t: {"argv": [str(_native_shim(t))]}, "ok", '"version": "9.9.9"', ""),
    ("console-script-of-a-venv", lambda t: {"argv": [str(_console_script(t))]}, "ok", "console script from", ""),
    ("host-folder-argument-not-bound", lambda t: {"argv": ["ls", str(_secret_dir(t))]}, "error", "",
     "host-secret.txt"),
    ("host-folder-argument-bound", lambda t: {"argv": ["ls", str(d := _secret_dir(t))], "binds": [str(d)]}, "ok",
     "host-secret.txt", ""),
    ("the-sandbox-own-work-folder", lambda t: {"argv": ["ls", "-a", "/work"]}, "ok", ".", "main"),
]


@pytest.mark.parametrize(("case", "make", "status", "shows", "hides"), PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_programs_see_themselves_and_only_what_is_bound(cli, write_env, mock_server, store_path, tmp_path, case,
                                                         make, status, shows, hides) -> None:
    if "npm" in case:
        _need("node")
    root = tmp_path / "project"
    root.mkdir()
    _, r = _eval(cli, write_env, mock_server(), store_path, make(root))
    assert r["status"] == status, r
    assert shows in r["state"].get("stdout", ""), r
    if hides:
        assert hides not in json.dumps(r), r
    if status == "error":
        assert any("No such file or directory" in e for e in r["errors"]), r["errors"]


# -- programs: memory --------------------------------------------------------------------------------
RESERVE = "new WebAssembly.Memory({initial: 1, maximum: 65536}); console.log('reserved')"  # ~10 GB of address space
LAZY = "const b = new ArrayBuffer(2 ** 31); b.slice(0, 1); console.log('allocated', b.byteLength)"  # 2 GB untouched
GREEDY = "const b = Buffer.alloc(600 * 2 ** 20, 1); console.log('held', b.length)"  # 600 MB resident


def _memory_cases() -> list[tuple[str, dict[str, Any], dict[str, str], str, str]]:
    """(case, eval arguments, extra environment, expected status, what stdout or the error must show)."""
    fallback = {"WORKBENCH_SANDBOX_MEMORY": "rlimit"}
    return [
        ("node-reserves-address-space", {"argv": ["node", "-e", RESERVE]}, {}, "ok", "reserved"),
        ("node-allocates-lazily", {"argv": ["node", "-e", LAZY]}, {}, "ok", "allocated 2147483648"),
        ("node-holds-more-than-the-limit", {"argv": ["node", "-e", GREEDY], "memory": "256m"}, {}, "error",
         "used more than its memory limit of 256 MB"),
        ("no-cgroup: node-reserves-address-space", {"argv": ["node", "-e", RESERVE]}, fallback, "ok", "reserved"),
    ]


@pytest.mark.parametrize("index", range(len(_memory_cases())), ids=[c[0] for c in _memory_cases()])
def test_memory_bounds_what_programs_hold_not_what_they_reserve(cli, write_env, mock_server, store_path,
                                                                index) -> None:
    _need("node")
    case, args, env, status, shows = _memory_cases()[index]
    if not case.startswith("no-cgroup") and not _cgroup():
        pytest.skip("this machine gives no memory cgroup (the no-cgroup case covers the fallback)")
    res, r = _eval(cli, write_env, mock_server(), store_path, args, env=env)
    assert r["status"] == status, r
    assert shows in (r["state"].get("stdout", "") if status == "ok" else " ".join(r["errors"])), r
    warned = [ln for ln in res.stderr.splitlines() if "no memory cgroup" in ln]
    assert len(warned) == (1 if env else 0), res.stderr


# -- MCP servers in the sandbox ------------------------------------------------------------------------
def _memory_server(nm: Path, _: Path) -> dict[str, Any]:
    return {"mcp": [str(nm / ".bin" / "mcp-server-memory")], "mcp_env": {"MEMORY_FILE_PATH": "/tmp/memory.json"}}


def _filesystem_server(nm: Path, _: Path) -> dict[str, Any]:
    return {"mcp": [str(nm / ".bin" / "mcp-server-filesystem"), "/work"]}


def _filesystem_server_by_node(nm: Path, _: Path) -> dict[str, Any]:
    return {"mcp": ["node", str(nm / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"), "/work"]}


def _sqlite_server(_: Path, script: Path) -> dict[str, Any]:
    return {"mcp": [str(script), "--db-path", "/tmp/test.db"]}


#: (case, eval arguments, the model's tool call, what its result must show, what it must not)
SERVERS: list[tuple[str, Callable[[Path, Path], dict[str, Any]], dict[str, Any], str, str]] = [
    ("server-memory-by-its-npm-shim", _memory_server,
     _call("create_entities", {"entities": [{"name": "ada", "entityType": "person", "observations": ["x"]}]}),
     '"ada"', "Error"),
    ("server-filesystem-given-the-sandbox-work-folder", _filesystem_server,
     _call("list_allowed_directories", {}), "/work", "/host"),
    ("server-filesystem-run-by-node", _filesystem_server_by_node,
     _call("list_directory", {"path": "/work"}), "", "main"),
    ("mcp-server-sqlite-console-script", _sqlite_server,
     _call("create_table", {"query": "CREATE TABLE t (x INTEGER)"}), "", "Error"),
]


@pytest.mark.parametrize(("case", "make", "call", "shows", "hides"), SERVERS, ids=[s[0] for s in SERVERS])
def test_real_mcp_servers_start_in_the_sandbox(cli, write_env, mock_server, store_path, request, case, make, call,
                                               shows, hides) -> None:
    nm = request.getfixturevalue("node_modules") if "sqlite" not in case else Path("/nonexistent")
    script = request.getfixturevalue("sqlite_server") if "sqlite" in case else Path("/nonexistent")
    mock = mock_server("script", "--by-turn", script=[call, "done"])
    res, r = _eval(cli, write_env, mock, store_path, make(nm, script))
    assert res.rc == 0 and r["status"] == "ok", (res.stderr, r)
    calls = r["state"]["mcp_calls"]
    assert calls[0]["tool"] == call["tool_calls"][0]["function"]["name"] and calls[0]["error"] is False, calls
    result = next(m["content"] for m in r["messages"] if m["role"] == "tool")
    assert shows in result, result
    assert hides not in result, result


# -- memory cgroups are removed --------------------------------------------------------------------------
def _groups(parent: Path) -> set[str]:
    return {d.name for d in parent.iterdir() if d.name.startswith("workbench-") and d.is_dir()}


def test_memory_cgroups_go_with_their_sandboxes(cli, write_env, mock_server, store_path) -> None:
    """A run removes the cgroups of its sandboxes, and one that a killed Workbench left behind is removed at the
    next start."""
    from workbench_local.sandbox.cgroup import Hierarchy, detect

    found = detect()
    if not isinstance(found, Hierarchy):
        pytest.skip(f"this machine gives no memory cgroup ({found})")
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = found.parent / f"workbench-{dead.pid}-0"
    stale.mkdir()
    before = _groups(found.parent)
    _, r = _eval(cli, write_env, mock_server(), store_path, {"argv": ["echo", "ran"]})
    assert r["status"] == "ok" and r["state"]["stdout"] == "ran\n", r
    assert not stale.exists(), "the stale cgroup was swept"
    left = [g for g in _groups(found.parent) - before if not Path(f"/proc/{g.split('-')[1]}").exists()]
    assert left == [], left


@pytest.mark.parametrize(("env", "cgroup"), [({}, None), ({"WORKBENCH_SANDBOX_MEMORY": "rlimit"}, False)],
                         ids=["this-machine", "no-cgroup"])
def test_sandbox_status_says_how_memory_is_bounded(cli, env, cgroup) -> None:
    expected = _cgroup() if cgroup is None else cgroup
    res = cli("sandbox", "status", "--json", env=env)
    assert res.rc == 0, res.stderr
    memory = last_json(res.stdout)["local"]["memory"]
    assert memory["cgroup"] is expected, memory
    assert ("version" in memory) if expected else memory["reason"], memory
    res = cli("sandbox", "status", env=env)
    line = next(ln for ln in res.stdout.splitlines() if "memory:" in ln)
    assert ("per sandbox bounds its resident memory" in line) if expected else ("RLIMIT_DATA" in line), line
