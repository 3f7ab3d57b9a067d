"""The secret scan: every documented shape is caught with its file and line; ordinary code is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import REPO, write_file
from workbench.bundles.bundle import build_bundle
from workbench.bundles.secrets_scan import SecretInBundleError, is_env_file, scan_bytes, scan_files, scan_text

# Secret-shaped strings are assembled at run time so this file itself holds none.
R = "Q7w8E9r0T1y2U3i4O5p6A7s8D9f0G1h2"
SECRETS = {
    "OpenAI": f'client = OpenAI(api_key="sk-proj-{R}")',
    "Anthropic": f"KEY = 'sk-ant-api03-{R}'",
    "AWS": "aws_access_key_id = " + "AKIA" + "IOSFODNN7EXAMPLE",
    "GitHub": f"export GH={'ghp_'}{R}abcd",
    "Hugging Face": f"login(token='hf_{R}')",
    "Slack": "url = '" + "xoxb-" + "123456789012-abcdefghij'",
    "Modal": f"MODAL_TOKEN_SECRET={'as-'}{R}",
    "PEM private key": "-----BEGIN " + "RSA PRIVATE KEY-----",
    "assigned": 'api_key = "' + "a8Fj29dkLq0Zx7Pm3Nb5" + '"',
}
HARMLESS = [
    'api_key = os.environ["OPENAI_API_KEY"]',
    'api_key = "EMPTY"',
    'api_key = "your-api-key-here-please-1234"',
    'tokenizer_name = "Qwen2.5-0.5B-Instruct"',
    'audio_tokenizer_class = "HiggsAudioV2TokenizerModel"',
    'password = "correcthorsebatterystaple"',
    'token_url = "https://example.com/oauth/token"',
    "-----BEGIN PUBLIC KEY-----",
    "mask-abcdefghijklmnopqrstuvwxyz0123",
    "sha = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'",
]


@pytest.mark.parametrize("kind", list(SECRETS))
def test_each_secret_shape_is_found_on_its_line(kind: str) -> None:
    text = f"import os\n\n# settings\n{SECRETS[kind]}\nprint('ok')\n"
    findings = scan_text("env/settings.py", text)
    assert [(f.path, f.line) for f in findings] == [("env/settings.py", 4)], findings
    assert R not in str(findings[0])  # the finding never repeats the secret


@pytest.mark.parametrize("line", HARMLESS)
def test_ordinary_lines_are_not_secrets(line: str) -> None:
    assert scan_text("x.py", line + "\n") == []


def test_the_product_and_bundled_envs_have_no_findings() -> None:
    """No false positives on real code (tests are left out: their fake tokens are meant to look real)."""
    # The product's own folders, walked (a checkout need not be a git repository).
    files = [p for d in ("workbench", "local_runtime", "cloud_runtime", "app", "envs", "scripts")
             for p in sorted((REPO / d).rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    pairs = [(str(p.relative_to(REPO)), p.read_bytes()) for p in [*files, REPO / "pyproject.toml", REPO / "README.md"]]
    assert len(pairs) > 100
    assert scan_files(pairs) == []


def test_allow_marker_silences_a_shape_but_never_a_known_token() -> None:
    line = SECRETS["assigned"] + "  # workbench: allow-secret\n"
    assert scan_text("x.py", line) == []
    known = [("OpenAI API key (keyring)", "a8Fj29dkLq0Zx7Pm3Nb5")]
    assert [f.kind for f in scan_text("x.py", line, known)] == ["your OpenAI API key (keyring)"]
    assert scan_text("x.py", "x = 'EMPTY'\n", [("OpenAI API key", "EMPTY")]) == []  # placeholders are too short


def test_dotenv_files_and_binaries() -> None:
    assert is_env_file(".env") and is_env_file("sub/.env.local") and not is_env_file(".env.example")
    assert [f.line for f in scan_text("sub/.env.production", "# x\n\nA=1\n")] == [3]
    binary = b"\x00\x01" + f"sk-proj-{R}".encode()
    assert [f.kind for f in scan_bytes("model.bin", binary)] == ["an OpenAI-style API key"]  # shapes in binaries too
    assert scan_bytes("model.bin", b"\x00\x01" + bytes(range(256)) * 40) == []  # and nothing in plain binary
    assert scan_bytes("model.bin", b"\x00\n\n" + R.encode(), [("HF token", R)])[0].line == 3  # known values


def _gz(data: bytes) -> bytes:
    import gzip

    return gzip.compress(data)


def _zip(members: dict[str, bytes], encrypt: bool = False) -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    raw = bytearray(buf.getvalue())
    if encrypt:  # set the "encrypted" flag bit of the local header and the central directory entry
        raw[6] |= 1
        cd = raw.rfind(b"PK\x01\x02")
        raw[cd + 8] |= 1
    return bytes(raw)


def _tar(members: dict[str, bytes]) -> bytes:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


KEY_LINE = f"x = 1\nopenai = 'sk-proj-{R}'\n".encode()


@pytest.mark.parametrize(("name", "data", "where"), [
    ("data.txt.gz", _gz(KEY_LINE), "data.txt.gz!data.txt:2"),
    ("bundle.zip", _zip({"docs/readme.md": b"hi", "conf/keys.py": KEY_LINE}), "bundle.zip!conf/keys.py:2"),
    ("files.tar", _tar({"a/keys.py": KEY_LINE}), "files.tar!a/keys.py:2"),
    ("files.tar.gz", _gz(_tar({"a/keys.py": KEY_LINE})), "files.tar.gz!files.tar!a/keys.py:2"),
    ("nested.zip", _zip({"inner.gz": _gz(KEY_LINE)}), "nested.zip!inner.gz!inner:2"),
    ("notes-utf16.txt", "\ufeff".encode("utf-16-le") + KEY_LINE.decode().encode("utf-16-le"), "notes-utf16.txt:2"),
    ("notes-utf16be.txt", b"\xfe\xff" + KEY_LINE.decode().encode("utf-16-be"), "notes-utf16be.txt:2"),
    ("notes-utf32.txt", b"\xff\xfe\x00\x00" + KEY_LINE.decode().encode("utf-32-le"), "notes-utf32.txt:2"),
], ids=["gzip", "zip", "tar", "tar-gz", "zip-in-gzip", "utf16-le", "utf16-be", "utf32"])
def test_keys_inside_compressed_files_and_wide_text_are_found(name: str, data: bytes, where: str) -> None:
    found = scan_bytes(name, data)
    assert [f"{f.path}:{f.line}" for f in found] == [where] and found[0].kind == "an OpenAI-style API key"


@pytest.mark.parametrize(("name", "data", "why"), [
    ("broken.gz", b"\x1f\x8b\x08\x00garbage", "cannot read"),
    ("locked.zip", _zip({"keys.py": KEY_LINE}, encrypt=True), "encrypted"),
], ids=["corrupt-gzip", "encrypted-zip"])
def test_an_archive_that_cannot_be_read_is_refused_with_the_reason(name: str, data: bytes, why: str) -> None:
    [finding] = scan_bytes(name, data)
    assert finding.path == name and why in finding.kind


def test_package_refuses_and_names_every_place(tmp_path: Path) -> None:
    env = tmp_path / "leaky"
    write_file(env / "__init__.py", "def load_environment():\n    raise RuntimeError\n")
    write_file(env / "data" / "config.yaml", f"model: gpt\nkeys:\n  hf: hf_{R}\n")
    write_file(env / "tools.py", f"X = 1\nKEY = 'sk-ant-api03-{R}'\n")
    with pytest.raises(SecretInBundleError) as e:
        build_bundle(str(env), tmp_path / "out", known_tokens=[])
    msg = str(e.value)
    assert f"{env / 'data' / 'config.yaml'}:3 looks like a Hugging Face token" in msg
    assert "tools.py:2" in msg and R not in msg and "\n" not in msg
    assert [(Path(f.path).name, f.line) for f in e.value.findings] == [("config.yaml", 3), ("tools.py", 2)]
    assert not (tmp_path / "out").exists()
