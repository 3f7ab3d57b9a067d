"""`workbench hub` end to end through the CLI against a real pypiserver with authentication: push, search,
versions and show; pull into a fresh home directory and evaluate the pulled environment (the same hash as
pushed); fork and evaluate the fork; credentials from the keyring; a public and a private index side by
side; and bad input, each one clear line with nothing installed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    REPO,
    CliResult,
    assert_user_error,
    cli_environment,
    last_json,
    run_workbench,
    write_file,
)
from tests.package_index import PASSWORD, USER, PackageIndex

ADDER = '''
    """Add two consecutive numbers: the model answers with the sum."""
    import os

    import workbench as wb


    def load_environment(n: int = 12) -> wb.Environment:
        if os.environ.get("ADDER_BROKEN"):
            raise RuntimeError("ADDER_BROKEN is set")
        rows = [{"prompt": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1)} for i in range(n)]
        rubric = wb.Rubric()

        @rubric.reward
        def correct(completion: str, answer: str) -> float:
            """1 when the completion is the sum."""
            return float(completion.strip() == answer)

        @rubric.metric
        def length(completion: str) -> float:
            """Characters in the completion."""
            return float(len(completion))

        return wb.Environment(name="adder", tasks=wb.TaskSet.from_records(rows), harness=wb.SingleTurn(),
                              rubric=rubric, description="Sums of two consecutive numbers.")
'''
README = "# adder\n\nA tiny environment for sharing: the reward is an exact match of the sum.\n"


def settings(home: Path, **indexes: str) -> None:
    lines = ["[hub]", f'default = "{next(iter(indexes))}"']
    for name, url in indexes.items():
        lines += [f"[hub.indexes.{name}]", f'url = "{url}"']
    write_file(home / "xdg-config" / "workbench" / "tui.toml", "\n".join(lines) + "\n")


class Home:
    """One user's machine: its own XDG folders and store, the index in its settings, the index credentials
    in its environment (unless ``creds`` is false)."""

    def __init__(self, root: Path, index: PackageIndex, creds: bool = True, **more: str) -> None:
        self.root = root
        settings(root, company=index.simple, **more)
        extra = {"WORKBENCH_INDEX_USERNAME": USER, "WORKBENCH_INDEX_PASSWORD": PASSWORD} if creds else {}
        self.env = cli_environment(root, root / "store.db", **extra)

    def __call__(self, *args: Any, env: dict[str, str] | None = None) -> CliResult:
        return run_workbench(args, {**self.env, **(env or {})}, cwd=self.root)

    def json(self, *args: Any) -> dict[str, Any]:
        res = self(*args, "--json")
        assert res.rc == 0, res.stderr
        return last_json(res.stdout)


@pytest.fixture
def adder(tmp_path: Path) -> Path:
    write_file(tmp_path / "src" / "adder" / "README.md", README)
    return write_file(tmp_path / "src" / "adder" / "__init__.py", ADDER).parent


@pytest.mark.slow  # several pushes and pulls through a pypiserver
def test_push_search_pull_eval_and_fork_round_trip(tmp_path: Path, adder: Path, package_index: Callable[..., Any],
                                                   mock_server: Callable[..., Any]) -> None:
    index = package_index(private=True)
    mock = mock_server("script", script=["1", "3", "5", "8"])
    me = Home(tmp_path / "me", index)
    ran = me.json("eval", adder, "--base-url", mock.base_url, "-m", "mock-model", "-n", "4")

    first = me.json("hub", "push", adder)
    assert (first["name"], first["version"], first["same_content_as"]) == ("adder", "0.1.0", None)
    again = me.json("hub", "push", adder)
    assert again["version"] == "0.1.1" and again["same_content_as"] == "0.1.0" and again["hash"] == first["hash"]
    assert sorted(p.name for p in index.packages.iterdir()) == ["workbench_env_adder-0.1.0-py3-none-any.whl",
                                                                 "workbench_env_adder-0.1.1-py3-none-any.whl"]
    exists = me("hub", "push", adder, "--version", "0.1.0")
    assert_user_error(exists, "adder 0.1.0 already exists on index company", "never overwritten")

    found = me.json("hub", "search", "consecutive")
    assert [(e["name"], e["latest"], e["versions"]) for e in found["environments"]] == [("adder", "0.1.1", 2)]
    assert me.json("hub", "search", "no such words")["environments"] == []
    versions = me.json("hub", "versions", "adder")["versions"]
    assert [v["version"] for v in versions] == ["0.1.0", "0.1.1"] and {v["hash"] for v in versions} == {first["hash"]}
    card = me.json("hub", "show", "adder==0.1.0")
    assert card["version"] == "0.1.0" and card["hash"] == first["hash"] and card["readme"] == README
    assert [(r["name"], r["kind"]) for r in card["rewards"]] == [("correct", "reward"), ("length", "metric")]
    assert card["rewards"][0]["doc"] == "1 when the completion is the sum."
    [result] = card["results"]
    assert result["model"] == "mock-model" and result["run_id"] == ran["run_id"]
    assert result["mean_reward"] == pytest.approx(ran["mean_reward"]) and result["rollouts"] == 4
    assert result["env_version"] == ran["env_version"]

    # Someone else, on a fresh home directory: pull, find it by name, evaluate it.
    you = Home(tmp_path / "you", index)
    pulled = you.json("hub", "pull", "adder")
    assert (pulled["version"], pulled["hash"], pulled["index"], pulled["error"]) == ("0.1.1", first["hash"], "company",
                                                                                     None)
    assert Path(pulled["path"]).is_relative_to(tmp_path / "you" / "xdg-data" / "workbench" / "hub")
    envs = {e["name"]: e for e in you.json("envs")["envs"]}
    assert envs["adder"]["origin"] == "hub" and envs["adder"]["hub"]["version"] == "0.1.1"
    assert envs["adder"]["hub"]["index"] == "company" and envs["adder"]["version"] == first["hash"][:12]
    theirs = you.json("eval", "adder", "--base-url", mock.base_url, "-m", "mock-model", "-n", "4")
    assert theirs["env_version"] == first["hash"][:12] == ran["env_version"]
    assert theirs["rollouts"] == 4 and theirs["errors"] == 0

    fork = you.json("hub", "fork", "adder==0.1.0", "my_adder")
    assert fork["forked_from"] == {"name": "adder", "version": "0.1.0", "hash": first["hash"], "index": "company"}
    envs = {e["name"]: e for e in you.json("envs")["envs"]}
    assert envs["my_adder"]["origin"] == "user" and envs["my_adder"]["forked_from"]["version"] == "0.1.0"
    forked = you.json("eval", "my_adder", "--base-url", mock.base_url, "-m", "mock-model", "-n", "2")
    assert forked["rollouts"] == 2 and forked["env_version"] != first["hash"][:12], "its own files, its own version"
    assert_user_error(you("hub", "fork", "adder", "my_adder"), "'my_adder' exists already", "new name")
    pushed_fork = you.json("hub", "push", "my_adder")
    assert you.json("hub", "show", "my_adder")["forked_from"]["hash"] == first["hash"]
    assert pushed_fork["version"] == "0.1.0"

    removed = you.json("hub", "remove", "adder")
    assert removed == {"name": "adder", "removed": True, "version": "0.1.1", "index": "company"}
    assert "adder" not in {e["name"] for e in you.json("envs")["envs"]}
    assert_user_error(you("hub", "remove", "my_adder"), "'my_adder' is not a pulled environment")


@pytest.mark.slow  # several pushes and pulls through a pypiserver
def test_keyring_credentials_and_a_public_index_beside_a_private_one(
        tmp_path: Path, adder: Path, package_index: Callable[..., Any]) -> None:
    private, public = package_index(private=True), package_index(private=False)
    keyring = {"PYTHON_KEYRING_BACKEND": "tests.cloud.keyring_backend.FileKeyring", "PYTHONPATH": str(REPO),
               "WORKBENCH_TEST_KEYRING": str(tmp_path / "keyring.json")}
    me = Home(tmp_path / "me", private, creds=False, public=public.simple)
    me.env.update(keyring)
    assert_user_error(me("hub", "push", adder), "no index 'company' credentials", "workbench login index company")
    login = me("login", "index", "company", "--token", f"{USER}:{PASSWORD}")
    assert login.rc == 0 and "stored the index 'company' credentials in keyring" in login.stdout, login.stderr
    assert json.loads((tmp_path / "keyring.json").read_text()) == {"workbench/index:company": f"{USER}:{PASSWORD}"}
    assert me.json("hub", "push", adder)["index"] == "company"
    assert_user_error(me("login", "index", "compnay", "--token", "a:b"), "unknown package index 'compnay'",
                      "did you mean 'company'")

    # the public index takes uploads with credentials only, and serves anyone
    assert_user_error(me("hub", "push", adder, "--index", "public"), "no index 'public' credentials")
    me("login", "index", "public", "--token", f"{USER}:{PASSWORD}")
    assert me.json("hub", "push", adder, "--index", "public")["index"] == "public"
    anyone = Home(tmp_path / "anyone", private, creds=False, public=public.simple)
    anyone.env.update(keyring, WORKBENCH_TEST_KEYRING=str(tmp_path / "empty-keyring.json"))
    assert anyone.json("hub", "pull", "adder", "--index", "public")["index"] == "public"
    assert_user_error(anyone("hub", "search", "--index", "company"), "index company needs credentials",
                      "workbench login index company")


@pytest.mark.slow  # several pushes and pulls through a pypiserver
def test_bad_input_is_one_line_and_installs_nothing(tmp_path: Path, adder: Path, package_index: Callable[..., Any],
                                                    mock_server: Callable[..., Any]) -> None:
    index = package_index(private=True)
    me = Home(tmp_path / "me", index)
    me.json("hub", "push", adder)
    not_an_index = mock_server("instant")
    cases = [
        (["hub", "search", "--index", "http://127.0.0.1:9/simple/"], {}, ["cannot reach index", "127.0.0.1:9"]),
        (["hub", "search"], {"WORKBENCH_INDEX_PASSWORD": "wrong"}, ["index company refused the credentials",
                                                                     "workbench login index company"]),
        (["hub", "search", "--index", not_an_index.root + "/simple/"], {}, ["is not a package index"]),
        (["hub", "pull", "addr"], {}, ["no environment 'addr' on index company", "did you mean adder"]),
        (["hub", "pull", "adder==9.9.9"], {}, ["adder has no version 9.9.9", "0.1.0"]),
        (["hub", "pull", "adder=="], {}, ["is not NAME or NAME==VERSION"]),
        (["hub", "push", adder, "--version", "one"], {}, ["--version 'one' is not a version"]),
        (["hub", "push", adder, "--index", "compnay"], {}, ["unknown package index 'compnay'", "did you mean"]),
        (["hub", "fork", "adder", "arithmetic"], {}, ["'arithmetic' exists already"]),
        (["hub", "pull", "adder", "--as", "arithmetic"], {}, ["named 'arithmetic' exists here (bundled"]),
        (["hub", "remove", "adder"], {}, ["no pulled environment 'adder'"]),
    ]
    for args, env, fragments in cases:
        assert_user_error(me(*args, env=env), *fragments)
    assert not (tmp_path / "me" / "xdg-data" / "workbench" / "hub" / "records").exists(), "nothing was installed"


@pytest.mark.slow  # several pushes and pulls through a pypiserver
def test_a_tampered_wheel_is_refused_and_a_broken_env_stays_listed(tmp_path: Path, adder: Path,
                                                                   package_index: Callable[..., Any]) -> None:
    from workbench.authoring import discovery
    from workbench.bundles.bundle import bundle_contents
    from workbench.hub.card import build_card
    from workbench.hub.publish import build_wheel, upload
    from workbench.packaging.indexes import Index

    index = package_index(private=True)
    me = Home(tmp_path / "me", index)
    me.json("hub", "push", adder)  # 0.1.0, honest
    ref = discovery.resolve(str(adder))
    contents = bundle_contents(ref, known_tokens=[])
    card = build_card(discovery.load_ref(ref), name="adder", version="0.2.0", digest="0" * 64,
                      env_version="0" * 12, conn=None)
    filename, wheel = build_wheel(ref, contents, "0.2.0", card)  # files that do not hash to what it says
    upload(Index("company", index.simple, index.root, USER, PASSWORD), filename, wheel)
    you = Home(tmp_path / "you", index)
    assert_user_error(you("hub", "pull", "adder"), "workbench_env_adder-0.2.0-py3-none-any.whl", "hash to",
                      "says 000000000000", "nothing was installed")
    assert not (tmp_path / "you" / "xdg-data" / "workbench" / "hub").exists()

    broken = you("hub", "pull", "adder==0.1.0", env={"ADDER_BROKEN": "1"})
    assert broken.rc == 0 and "nothing of it has run" in broken.stdout, "a pull runs none of its code"
    envs = {e["name"]: e for e in last_json(you("envs", "--json", env={"ADDER_BROKEN": "1"}).stdout)["envs"]}
    assert "error" not in envs["adder"] and envs["adder"]["hub"]["version"] == "0.1.0", "nor does the listing"
    failed = you("validate", "adder", env={"ADDER_BROKEN": "1"})
    assert failed.rc != 0 and "ADDER_BROKEN is set" in failed.stdout + failed.stderr, "running it runs its code"
    assert you.json("hub", "remove", "adder")["removed"] is True


def test_the_store_keeps_no_index_credentials(tmp_path: Path, adder: Path, package_index: Callable[..., Any]) -> None:
    index = package_index(private=True)
    me = Home(tmp_path / "me", index)
    me.json("hub", "push", adder)
    me.json("hub", "pull", "adder", "--as", "adder_copy")
    for path in [*(tmp_path / "me").rglob("*")]:
        if path.is_file() and path.suffix in (".json", ".toml", ".db", ".whl", ".py"):
            assert PASSWORD.encode() not in path.read_bytes(), path


DEP_ENV = '''
    """An environment with a dependency of its own: the answer comes from wbdep_b."""
    import wbdep_b

    import workbench as wb


    def load_environment() -> wb.Environment:
        rubric = wb.Rubric()

        @rubric.reward
        def exact(completion: str, answer: str) -> float:
            return float(completion.strip() == answer)

        return wb.Environment(name="depended", tasks=wb.TaskSet.from_records([{"prompt": "v?", "answer": wbdep_b.VERSION}]),
                              harness=wb.SingleTurn(), rubric=rubric)
'''


@pytest.mark.slow  # several pushes and pulls through a pypiserver
def test_dependencies_are_resolved_by_uv_and_installed_beside_the_pulled_env(
        tmp_path: Path, package_index: Callable[..., Any], mock_server: Callable[..., Any]) -> None:
    import importlib.util

    from tests.package_index import make_wheel

    index = package_index(private=True)
    for name, version, requires in (("wbdep-a", "1.0", ()), ("wbdep-a", "1.1", ()), ("wbdep-b", "2.0", ("wbdep-a>=1",))):
        make_wheel(index.packages, name, version, requires)
    assert importlib.util.find_spec("wbdep_b") is None, "not in the environment running the tests"
    src = tmp_path / "src" / "depended"
    write_file(src / "__init__.py", DEP_ENV)
    write_file(src / "pyproject.toml", '[project]\nname = "depended"\nversion = "0.1"\ndependencies = ["wbdep-b"]\n')
    me = Home(tmp_path / "me", index)
    me.env["PYTHONPATH"] = str(tmp_path / "site")  # the publisher has the dependency where they work
    write_file(tmp_path / "site" / "wbdep_b.py", "VERSION = '2.0'\n")
    pushed = me.json("hub", "push", src)
    card = me.json("hub", "show", "depended")
    assert card["hash"] == pushed["hash"]

    you = Home(tmp_path / "you", index)
    pulled = you.json("hub", "pull", "depended")
    assert pulled["lock"] == ["wbdep-a==1.1", "wbdep-b==2.0"], "resolved by uv, the dependency's own dependency too"
    deps = Path(pulled["deps"])
    assert deps == Path(pulled["install"]) / "deps" and deps.parent.parent == tmp_path / "you" / "xdg-data" / \
        "workbench" / "hub" / "installed"
    assert (deps / "wbdep_a.py").is_file() and (deps / "wbdep_b.py").read_text() == "VERSION = '2.0'\n"
    assert pulled["error"] is None
    mock = mock_server("instant", "--reply", "2.0")
    ran = you.json("eval", "depended", "--base-url", mock.base_url, "-m", "mock-model")
    assert ran["mean_reward"] == 1.0 and ran["env_version"] == card["env_version"] != pushed["hash"][:12]
    assert importlib.util.find_spec("wbdep_b") is None, "never installed into the user's own environment"
