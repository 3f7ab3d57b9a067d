"""``workbench package``, ``login`` and ``logout`` as a user runs them: subprocesses, real files, real keyring API."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, CliResult, assert_user_error, cli_environment, last_json, write_file
from workbench.bundles.verify import verify_bundle

# slow: package, login and logout as CLI processes, several per case
pytestmark = pytest.mark.slow

KEYRING = "tests.cloud.keyring_backend.FileKeyring"
TOKEN_VARS = ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "ANTHROPIC_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
              "MODAL_CONFIG_PATH", "MODAL_PROFILE")
# Built at run time so this file holds nothing a secret scanner would flag.
OPENAI = "sk-" + "proj-" + "Q7w8E9r0T1y2U3i4O5p6A7s8D9f0"


def workbench(args: list[object], env: dict[str, str], stdin: str | None = None) -> CliResult:
    p = subprocess.run([sys.executable, "-m", "workbench.cli", *(str(a) for a in args)], env=env, cwd=REPO,
                       input=stdin if stdin is not None else "", capture_output=True, text=True, timeout=120)
    return CliResult(p.returncode, p.stdout, p.stderr)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A clean CLI environment with no tokens anywhere and a file-backed test keyring."""
    e = {k: v for k, v in cli_environment(tmp_path).items() if k not in TOKEN_VARS}
    e.update(HOME=str(tmp_path / "home"), MODAL_CONFIG_PATH=str(tmp_path / "home" / ".modal.toml"),
             PYTHON_KEYRING_BACKEND=KEYRING, WORKBENCH_TEST_KEYRING=str(tmp_path / "keyring.json"))
    return e


def keyring_entries(env: dict[str, str]) -> dict[str, str]:
    path = Path(env["WORKBENCH_TEST_KEYRING"])
    return json.loads(path.read_text()) if path.exists() else {}


# -- package ---------------------------------------------------------------------------------------
def test_package_arithmetic_json(tmp_path: Path, env: dict[str, str]) -> None:
    first = workbench(["package", "arithmetic", "-o", tmp_path / "dist", "--json"], env)
    assert first.rc == 0, first.stderr
    out = last_json(first.stdout)
    assert out["env"] == "arithmetic" and len(out["hash"]) == 64 and out["lock"] == []
    envs = last_json(workbench(["envs", "--json"], env).stdout)["envs"]
    assert out["hash"][:12] == out["env_version"] == next(e["version"] for e in envs if e["name"] == "arithmetic")
    bundle = Path(out["path"])
    assert bundle == tmp_path / "dist" / f"arithmetic-{out['hash'][:12]}"
    assert sorted(p.name for p in bundle.iterdir()) == sorted(["bundle.json", "requirements.lock", Path(out["wheel"]).name])
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert manifest["hash"] == out["hash"] and [f["path"] for f in manifest["files"]] == ["README.md", "__init__.py", "train.toml"]
    before = {p.name: p.read_bytes() for p in bundle.iterdir()}

    again = workbench(["package", "arithmetic", "-o", tmp_path / "dist", "--json"], env)
    assert last_json(again.stdout)["hash"] == out["hash"]
    assert {p.name: p.read_bytes() for p in bundle.iterdir()} == before
    assert verify_bundle(bundle, out["hash"]).env == "arithmetic"

    human = workbench(["package", "arithmetic", "-o", tmp_path / "dist"], env)
    assert human.rc == 0 and out["hash"] in human.stdout


def test_package_refuses_a_secret_with_file_and_line(tmp_path: Path, env: dict[str, str]) -> None:
    src = tmp_path / "leaky"
    write_file(src / "__init__.py", "from .settings import MODEL\n\n\ndef load_environment():\n    raise RuntimeError\n")
    write_file(src / "settings.py", f'MODEL = "gpt-4o-mini"\n# the key for the judge\nOPENAI_KEY = "{OPENAI}"\n')
    res = workbench(["package", src, "-o", tmp_path / "dist"], env)
    line = assert_user_error(res, "refusing to package", "settings.py:3", "OpenAI")
    assert OPENAI not in res.stderr + res.stdout
    assert not (tmp_path / "dist").exists()
    assert line


def test_package_refuses_a_dotenv_file_and_a_token_from_the_environment(tmp_path: Path, env: dict[str, str]) -> None:
    src = tmp_path / "envdir"
    write_file(src / "__init__.py", "def load_environment():\n    raise RuntimeError\n")
    write_file(src / ".env", "# local settings\nDEBUG=1\n")
    assert_user_error(workbench(["package", src, "-o", tmp_path / "dist"], env), ".env:2", ".env file")

    (src / ".env").unlink()
    token = "plain-looking-" + "but-real-token-123"  # no known shape: only the literal value betrays it
    write_file(src / "notes.txt", f"line one\ncurl -H 'x-api: {token}'\n")
    res = workbench(["package", src, "-o", tmp_path / "dist"], {**env, "ANTHROPIC_API_KEY": token})
    assert_user_error(res, "notes.txt:2", "Anthropic API key")
    assert token not in res.stderr
    ok = workbench(["package", src, "-o", tmp_path / "dist", "--json"], env)
    assert ok.rc == 0, ok.stderr


def test_package_unknown_env_is_one_line(tmp_path: Path, env: dict[str, str]) -> None:
    assert_user_error(workbench(["package", "arithmatic", "-o", tmp_path / "dist"], env), "did you mean arithmetic")


# -- login / logout --------------------------------------------------------------------------------
def test_login_logout_with_the_keyring(env: dict[str, str]) -> None:
    res = workbench(["login", "openai"], env, stdin=OPENAI + "\n")
    assert res.rc == 0, res.stderr
    assert "stored the OpenAI token in keyring" in res.stdout
    assert OPENAI not in res.stdout + res.stderr
    assert keyring_entries(env) == {"workbench/openai": OPENAI}

    res = workbench(["login", "modal", "--stdin"], env, stdin="ak-abc123\nas-def456\n")
    assert res.rc == 0, res.stderr
    assert keyring_entries(env)["workbench/modal"] == "ak-abc123:as-def456"

    res = workbench(["logout", "openai"], env)
    assert res.rc == 0 and "removed the OpenAI token" in res.stdout
    assert "workbench/openai" not in keyring_entries(env)
    res = workbench(["logout", "openai"], {**env, "OPENAI_API_KEY": "x"})
    assert res.rc == 0 and "no OpenAI token was stored" in res.stdout and "OPENAI_API_KEY is still set" in res.stdout


def test_login_with_token_flag_and_bad_input(env: dict[str, str]) -> None:
    res = workbench(["login", "hf", "--token", "hf_" + "a1" * 16], env)
    assert res.rc == 0, res.stderr
    assert keyring_entries(env) == {"workbench/hf": "hf_" + "a1" * 16}
    assert_user_error(workbench(["login", "modal", "--token", "ak-only"], env), "ID:SECRET")
    assert_user_error(workbench(["login", "openai"], env, stdin="\n"), "empty")
    bad = workbench(["login", "gcp", "--token", "x"], env)
    assert bad.rc != 0 and "gcp" in bad.stderr and "Traceback" not in bad.stderr


def test_login_without_a_keyring_backend_is_one_clear_line(env: dict[str, str]) -> None:
    res = workbench(["login", "openai", "--token", OPENAI], {**env, "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"})
    line = assert_user_error(res, "no keyring backend", "OPENAI_API_KEY")
    assert OPENAI not in line


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_login_prompts_without_echo_on_a_terminal(env: dict[str, str]) -> None:
    import os
    import pty
    import time

    pid, fd = pty.fork()
    if pid == 0:  # the child: `workbench login modal` on a terminal
        os.chdir(REPO)
        os.execve(sys.executable, [sys.executable, "-m", "workbench.cli", "login", "modal"], env)
    seen = b""

    def read_until(marker: bytes, timeout: float = 60.0) -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while marker not in seen and time.monotonic() < deadline:
            try:
                seen += os.read(fd, 1024)
            except OSError:
                break

    try:
        read_until(b"token id")
        os.write(fd, b"ak-typed123\r")
        read_until(b"token secret")
        os.write(fd, b"as-typed456\r")
        read_until(b"stored the Modal token")
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, seen
    assert b"stored the Modal token" in seen
    assert b"ak-typed123" not in seen and b"as-typed456" not in seen  # nothing echoed
    assert keyring_entries(env) == {"workbench/modal": "ak-typed123:as-typed456"}
