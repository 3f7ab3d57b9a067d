"""The hub as a hostile user and a hostile index meet it: removals outside the hub folder, code that runs on
pull or listing, symlinks out of an environment, secrets the scan must know, requirement and size injection
through a wheel, unusable cards, an impostor card, concurrent and killed pulls. Real processes against a
real pypiserver on 127.0.0.1; each bad input is one line, a non-zero exit, and the hub folder's listing
unchanged."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import signal
import subprocess
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO, assert_user_error, last_json, workbench_argv, write_file
from tests.hub.test_hub import ADDER, README, Home
from tests.package_index import PackageIndex

# slow: pushes and pulls through a real pypiserver
pytestmark = pytest.mark.slow

SNOOPER = '''
    """Writes what it can see when its code runs: the marker names the process that ran it."""
    import os
    import sys

    import workbench as wb

    if os.environ.get("SNOOP_FILE"):
        with open(os.environ["SNOOP_FILE"], "a") as f:
            f.write(f"{' '.join(sys.argv[1:3])}|{os.environ.get('WORKBENCH_INDEX_PASSWORD')}\\n")


    def load_environment() -> wb.Environment:
        rubric = wb.Rubric()

        @rubric.reward
        def exact(completion: str, answer: str) -> float:
            return float(completion.strip() == answer)

        return wb.Environment(name="snooper", tasks=wb.TaskSet.from_records([{"prompt": "1?", "answer": "1"}] * 3),
                              harness=wb.SingleTurn(), rubric=rubric)
'''


def listing(*roots: Path) -> list[str]:
    """Every path under ``roots`` (links as links): what must not change when a command is refused."""
    out = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            out += [os.path.join(dirpath, n) for n in sorted(dirnames + filenames)]
    return sorted(out)


def hub_dir(home: Home) -> Path:
    return home.root / "xdg-data" / "workbench" / "hub"


@pytest.fixture
def adder(tmp_path: Path) -> Path:
    write_file(tmp_path / "src" / "adder" / "README.md", README)
    return write_file(tmp_path / "src" / "adder" / "__init__.py", ADDER).parent


def test_remove_takes_only_a_pulled_name_and_stays_inside_the_hub(tmp_path: Path, adder: Path,
                                                                   package_index: Callable[..., Any]) -> None:
    index = package_index(private=True)
    me = Home(tmp_path / "me", index)
    me.json("hub", "push", adder)
    me.json("hub", "pull", "adder", "--as", "pulled")
    victim = tmp_path / "victim" / "dir"
    write_file(victim / "precious.txt", "keep me\n")
    write_file(tmp_path / "victim" / "dir.json", json.dumps({"name": "dir", "version": "1"}))
    records = hub_dir(me) / "records"
    planted = records / "evil.json"  # a record whose files lie outside the hub
    planted.write_text(json.dumps({"name": "evil", "path": str(victim), "deps": str(victim)}))
    before = listing(hub_dir(me), tmp_path / "victim")
    cases = [
        (os.path.relpath(victim, records), ["no pulled environment"]),
        (str(victim), ["no pulled environment"]),
        ("..", ["no pulled environment"]),
        ("pulled/../pulled", ["no pulled environment"]),
        ("evil", ["no pulled environment 'evil'"]),
        ("arithmetic", ["'arithmetic' is not a pulled environment (bundled)"]),
    ]
    for name, fragments in cases:
        assert_user_error(me("hub", "remove", name), *fragments)
        assert listing(hub_dir(me), tmp_path / "victim") == before, name
    assert me.json("hub", "remove", "pulled")["removed"] is True
    assert (victim / "precious.txt").read_text() == "keep me\n"
    assert sorted(p.name for p in (hub_dir(me) / "installed").iterdir()) == []


def test_pull_and_listing_run_no_code_and_a_run_sees_no_index_credentials(
        tmp_path: Path, package_index: Callable[..., Any], mock_server: Callable[..., Any]) -> None:
    index = package_index(private=True)
    src = write_file(tmp_path / "src" / "snooper" / "__init__.py", SNOOPER).parent
    me = Home(tmp_path / "me", index)
    pushed = me.json("hub", "push", src)
    snoop = tmp_path / "snooped.txt"
    you = Home(tmp_path / "you", index)
    you.env["SNOOP_FILE"] = str(snoop)
    for args in (["hub", "pull", "snooper"], ["envs"], ["hub", "pull", "snooper"]):
        res = you(*args, "--json")
        assert res.rc == 0, res.stderr
        assert not snoop.exists(), f"`{' '.join(args)}` ran the pulled environment's code: {snoop.read_text()}"
    row = {e["name"]: e for e in last_json(you("envs", "--json").stdout)["envs"]}["snooper"]
    assert row["version"] == pushed["hash"][:12] and row["hub"]["tasks"] == 3 and "error" not in row

    async def listed_over_mcp() -> dict[str, Any]:
        from tests.workbench.test_mcp_server import call, serve

        async with serve(you.env, tmp_path) as s:
            return {e["name"]: e for e in (await call(s, "list_environments"))["envs"]}

    assert asyncio.run(listed_over_mcp())["snooper"]["version"] == pushed["hash"][:12]
    assert not snoop.exists(), f"MCP list_environments ran the pulled environment's code: {snoop.read_text()}"
    mock = mock_server("instant", "--reply", "1")
    ran = you.json("eval", "snooper", "--base-url", mock.base_url, "-m", "mock-model", "-n", "1")
    assert ran["mean_reward"] == 1.0
    seen = snoop.read_text().splitlines()
    assert seen and all(line.endswith("|None") for line in seen), f"the index password reached its code: {seen}"


def test_links_out_of_an_environment_are_refused_by_name(tmp_path: Path, adder: Path,
                                                         package_index: Callable[..., Any],
                                                         cli_env: dict[str, str]) -> None:
    from mcp.shared.exceptions import MCPError

    from tests.workbench.test_mcp_server import serve

    index = package_index(private=True)
    secret = write_file(tmp_path / "outside" / "secret.txt", "the outside file\n")
    me = Home(tmp_path / "me", index)
    user_envs = tmp_path / "me" / "xdg-data" / "workbench" / "envs"
    cases = [
        ("leaky_file", {"notes.txt": secret}, "notes.txt"),
        ("leaky_dir", {"data": secret.parent}, "data"),
        ("leaky_readme", {"README.md": secret}, "README.md"),
        ("leaky_deep", {"sub/deeper/x.txt": Path("/etc/passwd")}, "sub/deeper/x.txt"),
    ]
    for name, links, shown in cases:
        env = user_envs / name
        write_file(env / "__init__.py", ADDER)
        for rel, target in links.items():
            (env / rel).parent.mkdir(parents=True, exist_ok=True)
            (env / rel).symlink_to(target)
        packages = listing(index.packages)
        assert_user_error(me("hub", "push", name), shown, "links outside the environment's folder")
        assert_user_error(me("package", name, "--out", tmp_path / "dist"), shown, "outside")
        assert listing(index.packages) == packages and not (tmp_path / "dist").exists()
        row = {e["name"]: e for e in last_json(me("envs", "--json").stdout)["envs"]}[name]
        assert shown in row["error"]

    async def over_mcp() -> None:
        env = {**cli_env, **{k: v for k, v in me.env.items() if k.startswith("XDG_")}}
        async with serve(env, tmp_path) as s:
            for uri in ("env://leaky_file/files/notes.txt", "env://leaky_readme/README.md",
                        "env://leaky_dir/files/data/secret.txt", "env://leaky_file/files"):
                with pytest.raises(MCPError, match="links outside"):
                    await s.read_resource(uri)  # type: ignore[arg-type]
            listed = [str(r.uri) for r in (await s.list_resources()).resources]
            assert not [u for u in listed if u.startswith("env://leaky") and "/files/" in u], listed

    asyncio.run(over_mcp())


def test_the_scan_knows_every_secret_workbench_holds(tmp_path: Path, package_index: Callable[..., Any]) -> None:
    index = package_index(private=True)
    me = Home(tmp_path / "me", index)
    model_key, api_key = "correct horse battery staple 4711", "plain words that are a key 0815"
    assert me("models", "add", "teacher", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env",
              "TEACHER_KEY").rc == 0
    mcp_token = "the bearer token of mcp 2207"
    keyring_file = write_file(tmp_path / "keyring.json", json.dumps({"workbench/mcp": mcp_token}))
    secrets = {"TEACHER_KEY": model_key, "WORKBENCH_API_KEY": api_key,
               "PYTHON_KEYRING_BACKEND": "tests.cloud.keyring_backend.FileKeyring", "PYTHONPATH": str(REPO),
               "WORKBENCH_TEST_KEYRING": str(keyring_file)}
    cases = [
        ("model_key", model_key, "key of model 'teacher' (env:TEACHER_KEY)"),
        ("workbench_key", api_key, "Workbench credential (env:WORKBENCH_API_KEY)"),
        ("mcp_token", mcp_token, "Workbench mcp token (keyring)"),
    ]
    for name, value, label in cases:
        env = tmp_path / "src" / name
        write_file(env / "__init__.py", ADDER)
        write_file(env / "notes.txt", f"remember: {value}\n")
        packages = listing(index.packages)
        line = assert_user_error(me("hub", "push", env, env=secrets), "notes.txt", label)
        assert value not in line
        assert_user_error(me("package", env, "--out", tmp_path / "dist", env=secrets), "notes.txt", label)
        assert listing(index.packages) == packages and not (tmp_path / "dist").exists()


def _forged_wheel(index: PackageIndex, adder: Path, name: str, version: str, *, lock: list[str] | None = None,
                  card: Any = "honest", extra: tuple[str, int] | None = None) -> Path:
    """A wheel of ``adder`` published as ``name`` straight into the index's folder: its lock replaced (the
    hash made to match), its card replaced, or a member of ``extra`` = (name, size) zeros added."""
    import dataclasses

    from workbench.authoring import discovery
    from workbench.authoring.env_files import content_hash
    from workbench.bundles.bundle import bundle_contents, lock_text
    from workbench.hub.card import build_card
    from workbench.hub.publish import build_wheel

    ref = discovery.EnvRef(name, "path", adder)
    contents = bundle_contents(ref, known_tokens=[])
    if lock is not None:
        contents = dataclasses.replace(contents, lock=lock, hash=content_hash(contents.files, lock_text(lock)))
    honest = build_card(discovery.load_ref(ref), name=name, version=version, digest=contents.hash,
                        env_version=contents.env_version, conn=None)
    filename, wheel = build_wheel(ref, contents, version, honest)
    path = index.packages / filename
    with zipfile.ZipFile(__import__("io").BytesIO(wheel)) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("workbench_card.json") and card != "honest":
                data = json.dumps(card).encode()
            out.writestr(info.filename, data)
        if extra is not None:
            with out.open(extra[0], "w", force_zip64=True) as f:
                chunk = b"\0" * (1 << 20)
                for _ in range(extra[1] >> 20):
                    f.write(chunk)
    return path


def test_requirements_and_sizes_from_a_wheel_are_checked_before_anything_installs(
        tmp_path: Path, adder: Path, package_index: Callable[..., Any]) -> None:
    index = package_index(private=True)
    ran = tmp_path / "setup-py-ran"
    local = write_file(tmp_path / "local" / "setup.py",
                       f"open({str(ran)!r}, 'w').write('ran')\nfrom setuptools import setup\nsetup(name='x')\n").parent
    cases = [
        ("editable", {"lock": [f"-e {local}"]}, [f"-e {local}", "not a plain requirement"]),
        ("indexurl", {"lock": ["--index-url http://127.0.0.1:9/simple"]}, ["--index-url", "not a plain requirement"]),
        ("fileurl", {"lock": [f"x @ file://{local}"]}, ["file://", "not a plain requirement"]),
        ("bomb", {"extra": ("workbench_env_bomb/zeros.bin", 300 << 20)}, ["workbench_env_bomb-0.1.0", "over the limit"]),
    ]
    you = Home(tmp_path / "you", index)
    for name, forge, _ in cases:
        _forged_wheel(index, adder, name, "0.1.0", **forge)
    for name, _, fragments in cases:
        assert_user_error(you("hub", "pull", name), *fragments, "nothing was installed")
        assert not ran.exists(), f"{name}: a local setup.py ran"
        assert not (hub_dir(you) / "records").exists() or listing(hub_dir(you) / "records") == []


def test_bad_cards_urls_and_concurrent_pulls(tmp_path: Path, adder: Path, package_index: Callable[..., Any]) -> None:
    index = package_index(private=True)
    me = Home(tmp_path / "me", index)
    me.json("hub", "push", adder)
    bad = {"nullcard": None, "numcard": 42, "listcard": [1], "wrongdesc": {"env": "wrongdesc", "hash": "0" * 64,
                                                                             "description": 5},
           "wrongresults": {"env": "wrongresults", "hash": "0" * 64, "results": 3},
           "missing": {"env": "missing", "hash": "0" * 64},
           "halfreward": {"env": "halfreward", "version": "0.1.0", "hash": "0" * 64, "env_version": "0" * 12,
                          "rewards": [{"name": "r"}]},
           "textpassk": {"env": "textpassk", "version": "0.1.0", "hash": "0" * 64, "env_version": "0" * 12,
                         "results": [{"model": "m", "pass_at_k": {"1": "all"}}]}}
    for name, card in bad.items():
        _forged_wheel(index, adder, name, "0.1.0", card=card)
    found = me("hub", "search", "--json")
    assert found.rc == 0 and "Traceback" not in found.stderr, found.stderr
    out = last_json(found.stdout)
    assert [e["name"] for e in out["environments"]] == ["adder"]
    assert sorted(s["name"] for s in out["skipped"]) == sorted(bad)
    for name in bad:
        assert f"skipped {name} 0.1.0" in found.stderr
    you = Home(tmp_path / "you", index)
    for name in bad:
        [row] = you.json("hub", "versions", name)["versions"]
        assert row["version"] == "0.1.0" and "eval card" in row["error"]
        assert_user_error(you("hub", "show", name), name, "eval card")
        assert_user_error(you("hub", "pull", name), name, "eval card")
    assert not hub_dir(you).exists()
    for url in ("http://[::1/simple", "http://127.0.0.1:notaport/simple/"):
        assert_user_error(you("hub", "search", "--index", url), "is not an index URL")

    procs = [subprocess.Popen([*workbench_argv(), "hub", "pull", "adder", "--json"], env=you.env, cwd=you.root,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [(p.wait(120), *p.communicate()) for p in procs]
    for rc, _stdout, stderr in results:
        assert rc == 0 and "Traceback" not in stderr, stderr
    rec = json.loads((hub_dir(you) / "records" / "adder.json").read_text())
    assert [p.name for p in (hub_dir(you) / "installed").iterdir()] == [Path(rec["install"]).name]
    assert Path(rec["path"], "__init__.py").is_file()
    assert {e["name"]: e for e in you.json("envs")["envs"]}["adder"]["version"] == rec["hash"][:12]


def test_an_impostor_card_and_a_killed_pull_leave_the_installed_version_whole(
        tmp_path: Path, adder: Path, package_index: Callable[..., Any]) -> None:
    index = package_index(private=True)
    me = Home(tmp_path / "me", index)
    me.json("hub", "push", adder)
    you = Home(tmp_path / "you", index)
    first = you.json("hub", "pull", "adder")
    honest = next(index.packages.glob("workbench_env_adder-0.1.0-*.whl"))
    (index.packages / "workbench_env_impostor-0.1.0-py3-none-any.whl").write_bytes(honest.read_bytes())
    before = listing(hub_dir(you))
    assert_user_error(you("hub", "pull", "impostor"), "names environment 'adder'", "nothing was installed")
    assert listing(hub_dir(you)) == before
    other = write_file(tmp_path / "src" / "other" / "__init__.py", ADDER).parent
    me.json("hub", "push", other)
    assert_user_error(you("hub", "pull", "other", "--as", "adder"), "'adder' here is a pull of 'adder', not 'other'",
                      "hub remove adder")
    assert listing(hub_dir(you)) == before
    assert you.json("envs")["envs"] and json.loads((hub_dir(you) / "records" / "adder.json").read_text()) == \
        json.loads(json.dumps(first))

    write_file(adder / "more.txt", "a second version\n")
    second = me.json("hub", "push", adder)
    fd = os.open(hub_dir(you) / "locks" / "adder.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # the pull can stage its version but not make it the installed one
    proc = subprocess.Popen([*workbench_argv(), "hub", "pull", "adder"], env=you.env, cwd=you.root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    installed = hub_dir(you) / "installed"
    current = Path(first["install"]).name
    while proc.poll() is None and not [p for p in installed.iterdir() if p.name != current]:
        time.sleep(0.01)  # wait for the new version's folder to appear
    assert proc.poll() is None, "the pull ended before its new version's folder appeared"
    proc.send_signal(signal.SIGKILL)
    proc.wait(60)
    os.close(fd)
    rec = json.loads((hub_dir(you) / "records" / "adder.json").read_text())
    assert rec["version"] == "0.1.0" and Path(rec["path"], "__init__.py").read_text() == (adder / "__init__.py").read_text()
    envs = {e["name"]: e for e in you.json("envs")["envs"]}
    assert envs["adder"]["version"] == first["hash"][:12] and envs["adder"]["hub"]["version"] == "0.1.0"

    again = you.json("hub", "pull", "adder")
    assert again["version"] == "0.1.1" and again["hash"] == second["hash"]
    assert [p.name for p in installed.iterdir()] == [Path(again["install"]).name], "the killed pull's folder is gone"
    assert sorted(p.name for p in (hub_dir(you) / "records").iterdir()) == ["adder.json"]
    assert Path(again["path"], "more.txt").read_text() == "a second version\n"


# (project, the files the index holds for it): an environment project that has no wheel to read a card from
NO_WHEEL = [("sdistonly", ["workbench_env_sdistonly-0.1.0.tar.gz"]),
            ("ziponly", ["workbench_env_ziponly-0.2.0.zip", "workbench_env_ziponly-0.3.0.tar.gz"])]


def test_search_names_a_project_that_has_no_wheel(tmp_path: Path, adder: Path,
                                                  package_index: Callable[..., Any]) -> None:
    index = package_index(private=True)
    me = Home(tmp_path / "me", index)
    me.json("hub", "push", adder)
    for _, files in NO_WHEEL:
        for filename in files:
            (index.packages / filename).write_bytes(b"not a wheel")
    before = listing(hub_dir(me))
    found = me("hub", "search", "--json")
    assert found.rc == 0 and "Traceback" not in found.stderr, found.stderr
    out = last_json(found.stdout)
    assert [e["name"] for e in out["environments"]] == ["adder"]
    skipped = {s["name"]: s for s in out["skipped"]}
    assert sorted(skipped) == sorted(name for name, _ in NO_WHEEL)
    for name, files in NO_WHEEL:
        assert skipped[name]["version"] is None and "has no wheel" in skipped[name]["reason"]
        assert f"{len(files)} other file" in skipped[name]["reason"]
        [line] = [ln for ln in found.stderr.splitlines() if f"skipped {name}:" in ln]
        assert line.startswith("warning: ") and f"workbench-env-{name}" in line and "has no wheel" in line
    plain = me("hub", "search")
    assert plain.rc == 0 and "adder" in plain.stdout
    assert all(f"skipped {name}:" in plain.stderr for name, _ in NO_WHEEL), plain.stderr
    assert listing(hub_dir(me)) == before  # searching installs nothing
