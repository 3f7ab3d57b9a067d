"""Every file Workbench reads back is written whole or not at all, through one helper.

Two halves: :func:`workbench.fsutil.atomic_write` survives a failing write and a SIGKILL between the
write and the rename (the old content stays whole, no temporary file stays behind), and an AST scan of
the product's code finds every bare file write (``write_text``, ``write_bytes``, ``open`` for writing,
``json.dump``, a write ``os.open``, a hand-made rename) and fails unless the call site is on the
commented allow-list below.
"""

from __future__ import annotations

import ast
import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import REPO
from workbench import fsutil
from workbench.fsutil import atomic_open, atomic_write, leftover_temps

PACKAGES = ("workbench", "app", "local_runtime", "cloud_runtime")
WRITE_MODES = set("wax+")

#: (file, enclosing function, kind of write) -> why this write does not go through atomic_write.
ALLOWED: dict[tuple[str, str, str], str] = {
    # the Ray backend's trainer log: appended to by every rank, as torchrun's agents append to it locally
    ("cloud_runtime/ray/roles.py", "_TrainerRank.start", "open('ab')"): "a rank's output appended to the trainer's log",
    ("cloud_runtime/ray/roles.py", "RankGroup.start", "open('a')"): "where each rank runs, appended to the trainer's log",
    ("cloud_runtime/ray/roles.py", "RankGroup.poll", "open('a')"): "the lost node's line, appended to the trainer's log",
    ("cloud_runtime/ray/roles.py", "_Inference.start_vllm", "open('ab')"): "vLLM's command and output, appended to its log",
    # the helper itself: its own temporary file and the rename that publishes it
    ("workbench/fsutil.py", "atomic_open", "open('wb')"): "the helper's own temporary file",
    ("workbench/fsutil.py", "atomic_open", "os.replace"): "the helper's own rename",
    ("workbench/fsutil.py", "staged_folder", "Path.rename"): "the helper's own folder, renamed whole into place",
    # files inside a fresh staging folder that is renamed whole into place (the folder rename is atomic)
    ("workbench/authoring/templates.py", "_fill", "write_text"): "inside the staging folder of a new env",
    ("workbench/hub/pull.py", "_write_files", "write_bytes"): "inside a fresh staging folder renamed whole",
    ("workbench/hub/pull.py", "_write_tree", "os.replace"): "the staging folder renamed into place",
    ("workbench/formats/openai_evals/writer.py", "import_eval", "write_text"): "inside the staging folder of a new env",
    ("workbench/gateway/from_traffic.py", "from_traffic", "write_bytes"): "inside the staging folder of a new env",
    ("workbench/gateway/from_traffic.py", "from_traffic", "write_text"): "inside the staging folder of a new env",
    ("workbench/analysis/export_atif.py", "_write_trial", "write_bytes"): "inside the ATIF export's staging folder",
    ("workbench/formats/verifiers_export/package.py", "_copy_source", "write_text"):
        "inside the verifiers export's staging folder",
    ("workbench/formats/verifiers_export/package.py", "write_package", "write_bytes"):
        "inside the verifiers export's staging folder",
    ("workbench/formats/verifiers_export/package.py", "write_package", "write_text"):
        "inside the verifiers export's staging folder",
    ("workbench/frameworks/venvs.py", "FrameworkEnv._build", "write_text"):
        "the completion mark, inside the framework environment's build folder renamed whole",
    ("workbench/frameworks/venvs.py", "FrameworkEnv._build", "Path.rename"): "the build folder renamed into place",
    ("workbench/frameworks/venvs.py", "FrameworkEnv.ensure", "open('w')"): "the build's lock file, never read",
    ("workbench/frameworks/worker_loop.py", "_serve", "open('w')"):
        "a worker's answers on its own stdout (a pipe), not a file",
    ("workbench/frameworks/program_zygote.py", "_child", "open('w')"):
        "a run's report of the modules it imported, read once the run ended; a torn one is ignored",
    ("workbench/frameworks/program_zygote.py", "_child", "json.dump"):
        "a run's report of the modules it imported, read once the run ended; a torn one is ignored",
    ("local_runtime/models/tiny_model.py", "build_tiny_model", "write_text"): "inside the build folder renamed whole",
    ("local_runtime/models/tiny_model.py", "_build_into", "os.replace"): "the build folder renamed into place",
    ("local_runtime/training/trainer.py", "Trainer.save_checkpoint.write", "write_text"):
        "inside the checkpoint's temporary folder (checkpoint.write_atomic renames it whole)",
    ("local_runtime/training/checkpoint.py", "commit", "os.rename"): "checkpoint folders swapped into place",
    ("local_runtime/training/export.py", "_FileSink.close", "write_text"):
        "the weights' index, inside the export's temporary folder (checkpoint.write_atomic renames it whole)",
    ("local_runtime/training/sharded_checkpoint.py", "save", "write_text"):
        "inside the checkpoint's temporary folder (checkpoint.commit renames it whole)",
    ("cloud_runtime/resume.py", "snapshot_store", "os.replace"):
        "SQLite's online backup writes the temporary copy; the rename publishes it",
    # temporary files in a private temporary folder, handed to a subprocess and gone with the folder
    ("workbench/hub/publish.py", "upload", "write_bytes"): "the wheel handed to `uv publish`, in a temp folder",
    ("workbench/packaging/uv.py", "compile_lock", "write_text"): "requirements handed to uv, in a temp folder",
    ("workbench/packaging/uv.py", "install_target", "write_text"): "the lock handed to uv, in a temp folder",
    ("local_runtime/sandbox/image.py", "_Tar.__init__", "tarfile.open('w')"): "a rootfs tar in a NamedTemporaryFile",
    ("workbench/formats/harbor/verifier.py", "tar_of", "tarfile.open('w')"): "a tar in memory, sent into a container",
    # streams and logs: appended to or written as they go, never replaced
    ("workbench/rollouts/mcp_transport.py", "forked_connector", "open('w+')"): "an MCP server's stderr log",
    ("workbench/formats/openenv/servers.py", "LocalLauncher.start", "open('wb')"): "an OpenEnv server's stderr log",
    ("workbench/store/imports.py", "serve", "open('wb')"): "the import child's acks on its stdout pipe",
    ("workbench/store/writer.py", "serve", "open('wb')"): "the writer child's acks on its stdout pipe",
    ("local_runtime/server/embedded.py", "start_server", "open('wb')"): "the embedded server's log",
    ("local_runtime/training/roles.py", "LocalRoles.start_trainer", "open('ab')"): "the trainer's log, appended",
    ("cloud_runtime/launch.py", "launch_local", "open('ab')"): "the job's log, appended",
    ("cloud_runtime/modal/trainer.py", "run_node", "open('ab')"): "a node's log, appended",
    ("local_runtime/training/launcher.py", "start_local_nodes", "open('ab')"): "the trainer's log, appended",
    ("cloud_runtime/stream.py", "DirLog.append", "open('ab')"): "the record stream, appended line by line",
    # lock files: opened for flock, their content never read
    ("local_runtime/models/tiny_model.py", "ensure_tiny_model", "open('w')"): "a lock file",
    ("local_runtime/server/embedded.py", "ensure_server", "open('w')"): "a lock file",
    # the kernel's files and the sandbox's own files (inside a sandbox's root, remade with it)
    ("local_runtime/sandbox/agent.py", "Warm.spawn", "os.open(write)"): "/dev/null for a child's output",
    ("local_runtime/sandbox/agent.py", "become_command", "open('w')"): "/proc/self/oom_score_adj",
    ("local_runtime/sandbox/agent.py", "set_comm", "open('w')"): "/proc/self/comm",
    ("local_runtime/sandbox/cgroup.py", "detect", "write_text"): "a cgroup control file",
    ("local_runtime/sandbox/cgroup.py", "MemoryGroup.__init__", "write_text"): "cgroup memory limits",
    ("local_runtime/sandbox/fs.py", "HostDir._copy_in", "os.open(write)"): "a file copied into a sandbox",
    ("local_runtime/sandbox/fs.py", "HostDir._copy_in", "open('wb')"): "a file copied into a sandbox",
    ("local_runtime/sandbox/fs.py", "HostDir.download", "write_bytes"): "a sandbox's file copied out, remade from it",
    ("local_runtime/sandbox/fs.py", "HostDir.download", "open('wb')"): "a sandbox's folder copied out, remade from it",
    ("local_runtime/sandbox/process_pool.py", "ProcessPool.start", "write_text"): "/etc files of a fresh sandbox root",
}


# -- the scan -----------------------------------------------------------------------------------
def _const_str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _mode(call: ast.Call, pos: int) -> str:
    for kw in call.keywords:
        if kw.arg == "mode":
            return _const_str(kw.value) or "?"
    if len(call.args) > pos:
        return _const_str(call.args[pos]) or "?"
    return "r"


def _dotted(node: ast.AST) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def write_kind(call: ast.Call) -> str | None:
    """What kind of bare file write ``call`` is, or None when it writes no file."""
    f = call.func
    name = _dotted(f)
    if isinstance(f, ast.Attribute) and f.attr in ("write_text", "write_bytes"):
        return f.attr
    if name == "json.dump":
        return name
    if name in ("os.replace", "os.rename"):
        return name
    if (isinstance(f, ast.Attribute) and f.attr in ("rename", "replace") and len(call.args) == 1
            and not call.keywords and name.split(".")[0] not in ("os", "dataclasses")):
        return "Path." + f.attr  # str.replace takes two arguments
    if name in ("open", "io.open", "os.fdopen"):
        mode = _mode(call, 1)
        return f"open({mode!r})" if mode == "?" or set(mode) & WRITE_MODES else None
    if isinstance(f, ast.Attribute) and f.attr == "open" and name != "os.open":
        mode = _mode(call, 0)  # Path.open(mode), tarfile.open(mode=...)
        return f"{name}({mode!r})" if mode != "?" and set(mode) & WRITE_MODES else None
    if name == "os.open" and len(call.args) > 1:
        flags = ast.unparse(call.args[1])
        return "os.open(write)" if any(x in flags for x in ("O_WRONLY", "O_TRUNC", "O_APPEND")) else None
    return None


def scan(tree: ast.AST) -> list[tuple[str, str, int]]:
    """(enclosing function, kind, line) of each bare write in ``tree``."""
    found: list[tuple[str, str, int]] = []

    def walk(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{scope}.{child.name}" if scope else child.name
            if isinstance(child, ast.Call) and (kind := write_kind(child)):
                found.append((scope or "<module>", kind, child.lineno))
            walk(child, inner)

    walk(tree, "")
    return found


def product_writes() -> list[tuple[str, str, str, int]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for scope, kind, line in scan(ast.parse(path.read_text(encoding="utf-8"), filename=rel)):
                out.append((rel, scope, kind, line))
    return out


@pytest.mark.parametrize(("source", "expected"), [
    ('def f(p):\n    p.write_text("x")\n', [("f", "write_text")]),
    ('def f(p):\n    p.write_bytes(b"x")\n', [("f", "write_bytes")]),
    ('def f(p):\n    with open(p, "w") as fh:\n        fh.write("x")\n', [("f", "open('w')")]),
    ('def f(p):\n    with open(p, mode="wb") as fh:\n        pass\n', [("f", "open('wb')")]),
    ('def f(p, m):\n    open(p, m)\n', [("f", "open('?')")]),
    ('def f(p):\n    with p.open("a") as fh:\n        pass\n', [("f", "p.open('a')")]),
    ('import json\ndef f(d, fh):\n    json.dump(d, fh)\n', [("f", "json.dump")]),
    ('import os\ndef f(a, b):\n    os.replace(a, b)\n', [("f", "os.replace")]),
    ('class C:\n    def g(self, tmp, p):\n        tmp.rename(p)\n', [("C.g", "Path.rename")]),
    ('import os\ndef f(p):\n    os.open(p, os.O_WRONLY | os.O_CREAT)\n', [("f", "os.open(write)")]),
    # reads, in-memory replaces and dumps to a string are not writes
    ('import json\ndef f(p, s):\n    open(p).read(); open(p, "rb"); p.open()\n    s.replace("a", "b"); json.dumps(s)\n', []),
    ('import os\ndef f(p):\n    os.open(p, os.O_RDONLY)\n', []),
])
def test_the_scan_finds_each_kind_of_bare_write(source: str, expected: list[tuple[str, str]]) -> None:
    assert [(scope, kind) for scope, kind, _ in scan(ast.parse(source))] == expected


def test_every_file_write_in_the_product_goes_through_atomic_write() -> None:
    bare = [f"{rel}:{line} {kind} in {scope}" for rel, scope, kind, line in product_writes()
            if (rel, scope, kind) not in ALLOWED]
    assert not bare, ("write these through workbench.fsutil.atomic_write (or atomic_open), or add them to "
                      "ALLOWED with the reason they need not be atomic:\n" + "\n".join(bare))


def test_the_allow_list_names_only_writes_that_exist() -> None:
    present = {(rel, scope, kind) for rel, scope, kind, _ in product_writes()}
    assert not [k for k in ALLOWED if k not in present]


# -- the helper ---------------------------------------------------------------------------------
def _fsync_fails(monkeypatch: pytest.MonkeyPatch, target: Path) -> None:
    def fail(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(fsutil.os, "fsync", fail)
    atomic_write(target, "new content " * 1000)


def _block_raises(monkeypatch: pytest.MonkeyPatch, target: Path) -> None:
    with atomic_open(target) as f:
        f.write(b"half of the new ")
        raise RuntimeError("the producer failed")


def _rename_refused(monkeypatch: pytest.MonkeyPatch, target: Path) -> None:
    def refuse(src: str, dst: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(fsutil.os, "replace", refuse)
    atomic_write(target, b"new")


def _unencodable(monkeypatch: pytest.MonkeyPatch, target: Path) -> None:
    atomic_write(target, "caf\udce9", encoding="ascii")


@pytest.mark.parametrize(("fail", "error"), [
    (_fsync_fails, OSError), (_block_raises, RuntimeError), (_rename_refused, PermissionError),
    (_unencodable, UnicodeEncodeError),
])
def test_a_failing_write_leaves_the_old_content_whole_and_no_temporary_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail, error) -> None:
    target = tmp_path / "config.json"
    atomic_write(target, '{"old": true}\n')
    with pytest.raises(error):
        fail(monkeypatch, target)
    assert target.read_text() == '{"old": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_a_write_keeps_the_mode_of_the_file_it_replaces_and_makes_missing_folders(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "secret.json"
    atomic_write(target, "1", mkdirs=True, mode=0o600)
    atomic_write(target, "2")
    assert (target.read_text(), target.stat().st_mode & 0o777) == ("2", 0o600)
    assert leftover_temps(target.parent) == []


_HOLD_BEFORE_RENAME = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from workbench import fsutil
    marker = Path(sys.argv[2])
    def hold(src, dst):
        marker.write_text(src)
        while True:
            time.sleep(60)
    fsutil.os.replace = hold
    fsutil.atomic_write(sys.argv[1], "new content, never published " * 10000)
""")

_WRITE_IN_A_LOOP = textwrap.dedent("""
    import sys
    from pathlib import Path
    from workbench import fsutil
    marker = Path(sys.argv[2])
    i = 0
    while True:
        fsutil.atomic_write(sys.argv[1], chr(ord("a") + i % 26) * (8 << 20))
        i += 1
        if i == 2:
            marker.write_text("written")
""")


def _killed_child(script: str, target: Path, marker: Path) -> None:
    """Start ``script`` writing ``target``, wait until it says (through ``marker``) it got there, and
    SIGKILL it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", script, str(target), str(marker)], env=env)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, "the writer ended before it got to the point to be killed"
            assert time.monotonic() < deadline, "the writer never got to the point to be killed"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_a_writer_killed_between_write_and_rename_leaves_the_old_content_and_its_temp_goes_next(
        tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    target = folder / "config.json"
    atomic_write(target, '{"old": true}\n')
    _killed_child(_HOLD_BEFORE_RENAME, target, tmp_path / "marker")
    assert target.read_text() == '{"old": true}\n'
    assert len(leftover_temps(folder)) == 1  # a SIGKILL leaves the dead writer no chance to clean up
    atomic_write(target, '{"next": true}\n')
    assert target.read_text() == '{"next": true}\n'
    assert leftover_temps(folder) == []


def test_a_writer_killed_at_any_moment_leaves_one_whole_version(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    target = folder / "big.bin"
    _killed_child(_WRITE_IN_A_LOOP, target, tmp_path / "marker")
    data = target.read_bytes()
    assert len(data) == 8 << 20 and data == data[:1] * len(data)
    atomic_write(target, b"next")
    assert leftover_temps(folder) == []


def _as_is(target: Path) -> None:
    """Nothing at the target."""


def _empty_folder(target: Path) -> None:
    target.mkdir()


def _full_folder(target: Path) -> None:
    target.mkdir()
    (target / "kept.txt").write_text("mine")


def _a_file(target: Path) -> None:
    target.write_text("mine")


#: (what is at the target, over_empty, the block raises, the error expected or None, the target's files after)
STAGED = {
    "new folder": (_as_is, True, False, None, ["made.txt"]),
    "over an empty folder": (_empty_folder, True, False, None, ["made.txt"]),
    "over a full folder": (_full_folder, True, False, OSError, ["kept.txt"]),
    "over a file": (_a_file, True, False, OSError, None),
    "an empty folder, not to be replaced": (_empty_folder, False, False, FileExistsError, []),
    "a failing block": (_as_is, True, True, RuntimeError, "absent"),
    "a failing block over an empty folder": (_empty_folder, True, True, RuntimeError, []),
}


@pytest.mark.parametrize("case", list(STAGED))
def test_a_staged_folder_appears_whole_or_not_at_all(tmp_path: Path, case: str) -> None:
    setup, over_empty, fails, error, after = STAGED[case]
    target = tmp_path / "out"
    setup(target)
    try:
        with fsutil.staged_folder(target, over_empty=over_empty) as staging:
            assert staging.parent == tmp_path and staging != target
            (staging / "made.txt").write_text("new")
            if fails:
                raise RuntimeError("the block failed")
    except Exception as e:  # noqa: BLE001 - the table names the expected type
        assert error is not None and isinstance(e, error), e
    else:
        assert error is None
    if after == "absent":
        assert not target.exists()
    elif after is None:
        assert target.read_text() == "mine"
    else:
        assert sorted(p.name for p in target.iterdir()) == after
    assert [p.name for p in tmp_path.iterdir()] == ["out"] or after == "absent" and not list(tmp_path.iterdir())
    if error is None:
        assert target.stat().st_mode & 0o777 == 0o777 & ~fsutil._umask()  # an ordinary folder, not a private one
