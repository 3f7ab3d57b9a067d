"""``Runtime.confinement``: one command another framework starts (verifiers v1's agents), confined as
``wb.Local()`` confines its sandboxes. Each case runs a real ``bwrap`` with the prefix and checks what the
command could and could not do on the host."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import workbench as wb
from workbench.authoring.sandbox import SandboxError


def _run(prefix: list[str], cwd: Path, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, "--chdir", str(cwd), "--", "/bin/sh", "-c", script], capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)})


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    made = {name: tmp_path / name for name in ("code", "home", "tmp", "outside")}
    for p in made.values():
        p.mkdir()
    (made["code"] / "tool.txt").write_text("code\n")
    (made["outside"] / "secret.txt").write_text("secret\n")
    return made


#: (what the command does, its shell script, what its output must hold)
CASES = [
    ("reads the code it is given", "cat {code}/tool.txt", "code"),
    ("cannot write the code", "echo x > {code}/tool.txt || echo refused", "refused"),
    ("writes its home", "echo x > {home}/made && echo wrote", "wrote"),
    ("cannot see a folder it is not given", "cat {outside}/secret.txt || echo hidden", "hidden"),
    ("its /tmp is the folder named for it", "echo x > /tmp/shared && echo wrote", "wrote"),
    ("cannot see the host's processes", "echo $(ls -d /proc/[0-9]* | wc -l) processes", "processes"),
    ("cannot write the system folders", "touch /usr/wb-x 2>/dev/null || echo refused", "refused"),
    ("holds no capability", "grep CapEff /proc/self/status", "0000000000000000"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_confined_command(case: tuple[str, str, str], folders: dict[str, Path]) -> None:
    _, script, expected = case
    prefix = wb.Local().confinement(read_only=[folders["code"]], writable=[folders["home"]], tmp=folders["tmp"])
    assert prefix, "bubblewrap is set up on this machine (scripts/setup.sh installs it)"
    p = _run(prefix, folders["home"], script.format(**folders))
    assert p.returncode == 0, p.stderr
    assert expected in p.stdout, (p.stdout, p.stderr)
    assert (folders["code"] / "tool.txt").read_text() == "code\n"
    if "processes" in p.stdout:
        assert int(p.stdout.split()[0]) < 10  # its shell and bwrap's init, not the machine's
    if "/tmp/shared" in script:
        assert (folders["tmp"] / "shared").is_file()
    if "/usr/wb-x" in script:
        assert not Path("/usr/wb-x").exists()


@pytest.mark.parametrize("where", ["read_only", "writable", "tmp"])
def test_a_folder_that_does_not_exist_is_refused_in_one_line(where: str, tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    kw: dict[str, object] = {"read_only": [], "writable": []}
    kw[where] = missing if where == "tmp" else [missing]
    with pytest.raises(SandboxError, match=f"^cannot confine a command with {missing}: it does not exist$"):
        wb.Local().confinement(**kw)  # type: ignore[arg-type]


def test_no_isolation_asked_for_is_no_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert wb.Local(isolation="none").confinement(read_only=[tmp_path], writable=[]) == []
    monkeypatch.setenv("WORKBENCH_SANDBOX_ISOLATION", "none")
    assert wb.Local().confinement(read_only=[tmp_path], writable=[]) == []


def test_a_runtime_without_confinement_is_refused_by_name() -> None:
    with pytest.raises(SandboxError, match="'docker' runtime cannot confine a program another framework starts"):
        wb.Docker().confinement(read_only=[], writable=[])


def test_root_runs_without_a_user_namespace_but_with_every_capability_dropped(folders: dict[str, Path]) -> None:
    prefix = wb.Local().confinement(read_only=[], writable=[folders["home"]])
    assert prefix[-2:] == ["--cap-drop", "ALL"]
    assert ("--unshare-user" in prefix) == (os.geteuid() != 0)
