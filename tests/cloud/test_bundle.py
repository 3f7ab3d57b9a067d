"""Environment bundles: byte-reproducible, hashed like discovery's env_version, refused when changed."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import BUNDLED_DIR, write_file
from tests.package_index import make_wheel
from workbench.authoring import discovery
from workbench.bundles.bundle import LOCK, MANIFEST, BundleError, BundleMismatchError, build_bundle
from workbench.bundles.verify import bundle_env_ref, verify_bundle
from workbench.errors import ConfigError


def copy_env(name: str, dest: Path) -> Path:
    """A copy of a bundled environment at ``dest/<name>`` (no caches)."""
    target = dest / name
    shutil.copytree(BUNDLED_DIR / name, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


def build(path: Path, out: Path):
    return build_bundle(str(path), out, known_tokens=[])


def bundle_bytes(b) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(b.path.iterdir())}


def rewrite_wheel(wheel: Path, change) -> None:
    """Rewrite ``wheel`` entry by entry, letting ``change(name, data)`` return new bytes (or None to drop)."""
    with zipfile.ZipFile(wheel) as zf:
        items = [(zi, zf.read(zi)) for zi in zf.infolist()]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as out:
        for zi, data in items:
            new = change(zi.filename, data)
            if new is not None:
                out.writestr(zi, new)
    wheel.write_bytes(buf.getvalue())


# -- reproducibility -------------------------------------------------------------------------------
def test_same_files_give_byte_identical_bundles_and_the_same_hash(tmp_path: Path) -> None:
    a = copy_env("arithmetic", tmp_path / "a")
    b = copy_env("arithmetic", tmp_path / "b")
    # Different timestamps and permissions on the second copy change nothing.
    for f in b.rglob("*"):
        os.utime(f, (1_000_000_000, 1_000_000_000))
        f.chmod(0o755 if f.is_dir() else 0o600)
    one, two = build(a, tmp_path / "out1"), build(b, tmp_path / "out2")
    again = build(a, tmp_path / "out1")
    assert one.hash == two.hash == again.hash
    assert len(one.hash) == 64
    assert one.path.name == f"arithmetic-{one.hash[:12]}"
    assert bundle_bytes(one) == bundle_bytes(two) == bundle_bytes(again)
    assert sorted(bundle_bytes(one)) == sorted([MANIFEST, LOCK, one.wheel.name])
    with zipfile.ZipFile(one.wheel) as zf:
        assert all(zi.date_time == (1980, 1, 1, 0, 0, 0) for zi in zf.infolist())


@pytest.mark.parametrize("name", ["arithmetic", "coding", "doc_search", "wordle"])
def test_the_hash_extends_discoverys_env_version(tmp_path: Path, name: str) -> None:
    b = build(BUNDLED_DIR / name, tmp_path)
    ref = discovery.resolve(name)
    assert b.hash[:12] == ref.version() == b.env_version  # no declared dependencies: the same hash
    on_disk = sorted(p.relative_to(ref.path).parts for p in ref.path.rglob("*")
                     if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    assert [f["path"] for f in b.files] == ["/".join(parts) for parts in on_disk]


def test_version_and_bundle_hash_agree_where_path_order_and_component_order_differ(tmp_path: Path) -> None:
    """'a.txt' sorts before 'a/x' as a string but after it by components: one canonical order for both."""
    env = tmp_path / "orderenv"
    write_file(env / "__init__.py", "import workbench as wb\n\ndef load_environment():\n    raise SystemExit\n")
    for rel in ("a/x.txt", "a.txt", "a-b/y.txt"):
        write_file(env / rel, rel)
    b = build(env, tmp_path / "out")
    ref = discovery.resolve(str(env))
    assert [f["path"] for f in b.files] == ["__init__.py", "a/x.txt", "a-b/y.txt", "a.txt"]
    assert b.hash[:12] == ref.version()


def test_the_wheel_installs_with_pip_and_registers_the_environment(tmp_path: Path) -> None:
    b = build(BUNDLED_DIR / "arithmetic", tmp_path / "out")
    target = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
                        "--target", str(target), str(b.wheel)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert (target / b.import_name / "__init__.py").read_bytes() == (BUNDLED_DIR / "arithmetic" / "__init__.py").read_bytes()
    dists = list(metadata.distributions(path=[str(target)]))
    assert [d.metadata["Name"] for d in dists] == ["workbench-env-arithmetic"]
    eps = dists[0].entry_points.select(group="workbench.environments")
    assert [(ep.name, ep.value) for ep in eps] == [("arithmetic", b.import_name)]


# -- changes are refused ---------------------------------------------------------------------------
def test_one_changed_byte_gives_another_hash_and_verify_refuses_it(tmp_path: Path) -> None:
    env = copy_env("arithmetic", tmp_path / "src")
    original = build(env, tmp_path / "out")
    assert verify_bundle(original.path, original.hash).hash == original.hash
    assert verify_bundle(original.manifest, original.hash[:12]).env == "arithmetic"  # the short form works too

    init = env / "__init__.py"
    data = bytearray(init.read_bytes())
    data[100] ^= 0x01
    init.write_bytes(bytes(data))
    changed = build(env, tmp_path / "out")
    assert changed.hash != original.hash and changed.path != original.path
    verify_bundle(changed.path, changed.hash)  # consistent in itself...
    with pytest.raises(BundleMismatchError) as e:  # ...but not what was launched
        verify_bundle(changed.path, original.hash)
    msg = str(e.value)
    assert "refusing to run" in msg and original.hash[:12] in msg and changed.hash[:12] in msg


def _tamper_payload(b) -> None:
    def change(name: str, data: bytes) -> bytes:
        return data.replace(b"Answer with a number.", b"Answer with a letter.") if name.endswith("__init__.py") else data

    rewrite_wheel(b.wheel, change)


@pytest.mark.parametrize("tamper", [
    "payload_byte", "raw_wheel_byte", "extra_wheel_entry", "metadata", "lock_file", "manifest_hash", "missing_wheel",
])
def test_a_tampered_bundle_is_refused(tmp_path: Path, tamper: str) -> None:
    b = build(BUNDLED_DIR / "arithmetic", tmp_path)
    if tamper == "payload_byte":
        _tamper_payload(b)
    elif tamper == "raw_wheel_byte":
        raw = bytearray(b.wheel.read_bytes())
        raw[len(raw) // 2] ^= 0x20
        b.wheel.write_bytes(bytes(raw))
    elif tamper == "extra_wheel_entry":
        with zipfile.ZipFile(b.wheel, "a") as zf:
            zf.writestr("sitecustomize.py", "print('hi')\n")
    elif tamper == "metadata":
        rewrite_wheel(b.wheel, lambda n, d: d + b"Requires-Dist: evil==1\n" if n.endswith("METADATA") else d)
    elif tamper == "lock_file":
        b.lock_file.write_text("numpy==1.0\n")
    elif tamper == "manifest_hash":
        b.manifest.write_text(b.manifest.read_text().replace(b.hash, "0" * 64))
    elif tamper == "missing_wheel":
        b.wheel.unlink()
    with pytest.raises(BundleMismatchError, match="refusing to run"):
        verify_bundle(b.path, b.hash)
    if tamper != "missing_wheel":  # a coherent forgery: the manifest's sha256s updated to the changed files
        manifest = json.loads(b.manifest.read_text())
        manifest["wheel"]["sha256"] = hashlib.sha256(b.wheel.read_bytes()).hexdigest()
        manifest["lock_file"]["sha256"] = hashlib.sha256(b.lock_file.read_bytes()).hexdigest()
        b.manifest.write_text(json.dumps(manifest))
        with pytest.raises(BundleMismatchError, match="refusing to run"):
            verify_bundle(b.path, b.hash)


def test_every_sampled_single_byte_flip_of_the_wheel_is_refused(tmp_path: Path) -> None:
    """Flip one bit in every 29th byte of the wheel (headers, data, central directory), each time also
    fixing the manifest's sha256 of the wheel: verify refuses every one."""
    b = build(BUNDLED_DIR / "arithmetic", tmp_path)
    original, manifest = b.wheel.read_bytes(), json.loads(b.manifest.read_text())
    accepted = []
    for i in range(0, len(original), 29):
        raw = bytearray(original)
        raw[i] ^= 0x01
        b.wheel.write_bytes(bytes(raw))
        manifest["wheel"]["sha256"] = hashlib.sha256(raw).hexdigest()
        b.manifest.write_text(json.dumps(manifest))
        try:
            verify_bundle(b.path, b.hash)
            accepted.append(i)
        except BundleMismatchError:
            pass
    assert not accepted, f"byte flips at {accepted} were accepted"


def test_a_consistently_rebuilt_tampered_bundle_still_fails_the_launch_hash(tmp_path: Path) -> None:
    """Editing the files and fixing up every sha256 in the manifest does not help: the launch hash anchors it."""
    b = build(BUNDLED_DIR / "arithmetic", tmp_path / "orig")
    env = copy_env("arithmetic", tmp_path / "src")
    (env / "__init__.py").write_text((env / "__init__.py").read_text() + "\n# edited\n")
    forged = build(env, tmp_path / "forged")
    with pytest.raises(BundleMismatchError):
        verify_bundle(forged.path, b.hash)


def test_verify_rejects_what_is_not_a_bundle_or_a_hash(tmp_path: Path) -> None:
    b = build(BUNDLED_DIR / "arithmetic", tmp_path)
    with pytest.raises(ConfigError, match="not a bundle hash"):
        verify_bundle(b.path, "abc")
    with pytest.raises(BundleError, match="no bundle.json"):
        verify_bundle(tmp_path / "nothing-here", b.hash)


# -- the lock --------------------------------------------------------------------------------------
def _env_with_deps(root: Path, pyproject_deps: str, requirements: str = "") -> Path:
    env = root / "depenv"
    write_file(env / "__init__.py", """
        import workbench as wb

        def load_environment() -> wb.Environment:
            rubric = wb.Rubric()

            @rubric.reward
            def exact(completion: str, answer: str) -> float:
                return float(completion.strip() == answer)

            return wb.Environment(name="depenv", tasks=wb.TaskSet.from_records([{"prompt": "1+1?", "answer": "2"}]),
                                  harness=wb.SingleTurn(), rubric=rubric)
        """)
    write_file(env / "pyproject.toml", f'[project]\nname = "depenv"\nversion = "0.1"\ndependencies = {pyproject_deps}\n')
    if requirements:
        write_file(env / "requirements.txt", requirements)
    return env


@pytest.fixture
def dep_index(package_index: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """A real package index holding three small packages, the settings' default one (dependencies are
    resolved against it): ``wbdep-a`` 1.0 and 1.1, ``wbdep-b`` 2.0 (needs ``wbdep-a>=1``), ``wbdep-c`` 0.5."""
    index = package_index(private=False)
    for name, version, requires in (("wbdep-a", "1.0", ()), ("wbdep-a", "1.1", ()), ("wbdep-b", "2.0", ("wbdep-a>=1",)),
                                    ("wbdep-c", "0.5", ())):
        make_wheel(index.packages, name, version, requires)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    write_file(tmp_path / "config" / "workbench" / "tui.toml",
               f'[hub]\ndefault = "deps"\n[hub.indexes.deps]\nurl = "{index.simple}"\n')
    return index


def test_declared_requirements_are_resolved_by_uv_with_their_dependencies(tmp_path: Path, dep_index: Any) -> None:
    env = _env_with_deps(tmp_path, '["wbdep-b", "nothing-here; python_version < \'3\'"]',
                         "# comment\nwbdep-c  # inline comment\n")
    b = build(env, tmp_path / "out")
    want = ["wbdep-a==1.1", "wbdep-b==2.0", "wbdep-c==0.5"]  # wbdep-a: wbdep-b's own dependency, its newest
    assert b.lock == want
    assert b.lock_file.read_text() == "".join(f"{pin}\n" for pin in want)
    assert b.hash[:12] != discovery.resolve(str(env)).version()  # the lock extends the files' hash
    assert b.env_version == discovery.resolve(str(env)).version()
    with zipfile.ZipFile(b.wheel) as zf:
        meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert [ln.split(": ", 1)[1] for ln in meta.splitlines() if ln.startswith("Requires-Dist")] == want
    verify_bundle(b.path, b.hash)
    pinned = build(_env_with_deps(tmp_path / "old", '["wbdep-a<1.1"]'), tmp_path / "out")
    assert pinned.lock == ["wbdep-a==1.0"]


def test_a_requirement_the_index_cannot_satisfy_is_refused(tmp_path: Path, dep_index: Any) -> None:
    with pytest.raises(ConfigError, match="depenv.*surely-not-published-xyz"):
        build(_env_with_deps(tmp_path / "a", '["surely-not-published-xyz>=1"]'), tmp_path / "out")
    with pytest.raises(ConfigError, match="wbdep-a"):
        build(_env_with_deps(tmp_path / "b", '["wbdep-a>5"]'), tmp_path / "out")


# -- running a bundle ------------------------------------------------------------------------------
def test_an_unpacked_bundle_loads_with_the_same_name_and_version(tmp_path: Path) -> None:
    b = build(BUNDLED_DIR / "doc_search", tmp_path / "out")  # a package with a submodule and data files
    spec = bundle_env_ref(verify_bundle(b.path, b.hash).path, tmp_path / "run")
    env = discovery.load(spec)
    assert env.name == "doc_search" and env.version == b.hash[:12]
    assert list(env.tasks.take(2))


def test_a_single_file_environment_with_inline_script_metadata(tmp_path: Path, dep_index: Any) -> None:
    src = write_file(tmp_path / "src" / "tiny.py", '''
        # /// script
        # dependencies = ["wbdep-c"]
        # ///
        import workbench as wb


        def load_environment() -> wb.Environment:
            rubric = wb.Rubric()

            @rubric.reward
            def exact(completion: str, answer: str) -> float:
                return float(completion.strip() == answer)

            return wb.Environment(name="tiny", tasks=wb.TaskSet.from_records([{"prompt": "1+1?", "answer": "2"}]),
                                  harness=wb.SingleTurn(), rubric=rubric)
        ''')
    b = build(src, tmp_path / "out")
    assert b.lock == ["wbdep-c==0.5"]
    with zipfile.ZipFile(b.wheel) as zf:
        assert zf.read(f"{b.import_name}.py") == src.read_bytes()
    v = verify_bundle(b.path, b.hash)
    env = discovery.load(bundle_env_ref(v.path, tmp_path / "run"))
    assert env.name == "tiny" and env.version == discovery.resolve(str(src)).version()
