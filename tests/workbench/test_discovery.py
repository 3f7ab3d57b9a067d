"""Finding and loading environments: bundled names, files, packages, installed modules; versions; validate."""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

import workbench as wb
from tests.helpers import (
    ADDER_ENV,
    BUNDLED_DIR,
    CliResult,
    MockServer,
    assert_user_error,
    last_json,
    query,
    write_file,
)
from workbench.authoring import discovery
from workbench.authoring.discovery import EnvRef, env_version
from workbench.errors import OptionError

HEX12 = re.compile(r"^[0-9a-f]{12}$")

PACKAGE_INIT = '''
import json
from pathlib import Path

import workbench as wb

from .scoring import exact
from .tasks import make_rows


def load_environment(n: int = 4, prefix: str = "Q") -> wb.Environment:
    rubric = wb.Rubric()
    rubric.reward(exact)
    extra = json.loads((Path(__file__).parent / "data.json").read_text())
    return wb.Environment(name="pkgenv", tasks=wb.TaskSet.from_records(make_rows(n, prefix)), harness=wb.SingleTurn(),
                          rubric=rubric, description=extra["description"])
'''
PACKAGE_TASKS = '''
def make_rows(n, prefix):
    return [{"prompt": f"{prefix}{i}: say {i}", "answer": str(i)} for i in range(n)]
'''
PACKAGE_SCORING = '''
def exact(completion: str, answer: str) -> float:
    return float(completion.strip() == answer)
'''


def make_package(root: Path, name: str = "pkgenv") -> Path:
    pkg = root / name
    write_file(pkg / "__init__.py", PACKAGE_INIT)
    write_file(pkg / "tasks.py", PACKAGE_TASKS)
    write_file(pkg / "scoring.py", PACKAGE_SCORING)
    write_file(pkg / "data.json", '{"description": "a packaged env"}')
    return pkg


def bundled_names() -> dict[str, Path]:
    """What the bundled folder holds that counts as an environment, by the documented rule."""
    out: dict[str, Path] = {}
    for child in sorted(BUNDLED_DIR.iterdir()):
        if child.name.startswith(("_", ".")) or child.name == "__pycache__":
            continue
        if child.is_dir() and (child / "__init__.py").is_file():
            out[child.name] = child
        elif child.suffix == ".py":
            out[child.stem] = child
    return out


needs_arithmetic = pytest.mark.skipif("arithmetic" not in bundled_names(),
                                      reason="the bundled arithmetic environment (envs/arithmetic) is absent")


# -- loading ------------------------------------------------------------------------------------
@needs_arithmetic
def test_load_by_bundled_name() -> None:
    ref = discovery.resolve("arithmetic")
    assert ref.origin == "bundled" and ref.path == BUNDLED_DIR / "arithmetic"
    env = discovery.load("arithmetic")
    assert isinstance(env, wb.Environment)
    assert env.version == env_version(ref) and HEX12.match(env.version)
    assert len(list(env.tasks.take(3))) == 3


def test_load_by_file_path(write_env: Callable[..., Path]) -> None:
    path = write_env(ADDER_ENV, "adder_file.py")
    env = discovery.load(str(path))
    assert env.name == "adder"
    assert env.source == str(path.resolve())
    assert HEX12.match(env.version)
    assert len(env.tasks) == 20
    assert [f.name for f in env.rubric.functions] == ["correct", "words", "bonus"]


def test_env_args_pass_through_to_load_environment(write_env: Callable[..., Path]) -> None:
    path = write_env(ADDER_ENV, "adder_args.py")
    env = discovery.load(str(path), {"n": 3, "group_bonus": False})
    assert len(env.tasks) == 3
    assert [f.name for f in env.rubric.functions] == ["correct", "words"]


def test_load_package_directory_with_relative_imports(tmp_path: Path) -> None:
    pkg = make_package(tmp_path / "pkgs")
    env = discovery.load(str(pkg), {"n": 2, "prefix": "Z"})
    assert env.name == "pkgenv" and env.description == "a packaged env"
    assert [t.prompt for t in env.tasks] == ["Z0: say 0", "Z1: say 1"]
    assert env.source == str(pkg.resolve())


def test_load_installed_module_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    modname = f"wbtest_installed_{uuid.uuid4().hex[:8]}"
    site = tmp_path / "site"
    make_package(site, modname)
    monkeypatch.syspath_prepend(str(site))
    try:
        ref = discovery.resolve(modname)
        assert ref.origin == "installed" and ref.module == modname
        env = discovery.load(modname, {"n": 5})
        assert env.name == "pkgenv" and len(env.tasks) == 5
        assert HEX12.match(env.version)
    finally:
        for key in [k for k in list(sys.modules) if k == modname or k.startswith(modname + ".")]:
            monkeypatch.delitem(sys.modules, key)


def test_installed_module_by_name_from_the_cli(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    modname = f"wbtest_cli_{uuid.uuid4().hex[:8]}"
    site = tmp_path / "site"
    make_package(site, modname)
    res = cli("validate", modname, "-a", '{"n": 3}', "--json",
              env={"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))})
    assert res.rc == 0, res.stderr
    rep = last_json(res.stdout)
    assert rep["env"] == "pkgenv" and rep["total_tasks"] == 3 and rep["ok"] is True


def test_a_module_that_is_not_an_environment() -> None:
    with pytest.raises(wb.EnvLoadError, match="load_environment"):
        discovery.load("json")


def test_bad_specs_are_env_load_errors(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    with pytest.raises(wb.EnvLoadError, match="__init__.py"):
        discovery.resolve(str(tmp_path / "plain"))
    with pytest.raises(wb.EnvLoadError, match="does not exist"):
        discovery.resolve(str(tmp_path / "missing.py"))
    (tmp_path / "tasks.txt").write_text("x")
    with pytest.raises(wb.EnvLoadError, match="not a Python file"):
        discovery.resolve(str(tmp_path / "tasks.txt"))
    with pytest.raises(wb.EnvLoadError, match="unknown environment"):
        discovery.resolve(f"no_such_env_{uuid.uuid4().hex[:6]}")


def test_load_environment_must_return_an_environment(write_env: Callable[..., Path]) -> None:
    path = write_env("def load_environment():\n    return {'name': 'x'}\n", "wrongtype.py")
    with pytest.raises(wb.EnvLoadError, match="returned dict, not a wb.Environment"):
        discovery.load(str(path))


def test_env_args_must_be_a_json_object() -> None:
    assert discovery.parse_env_args('{"n": 5, "seed": 1}') == {"n": 5, "seed": 1}
    assert discovery.parse_env_args(None) == {}
    for bad in ("{n: 5}", "[1]", "3"):
        with pytest.raises(OptionError, match="^env_args ") as caught:
            discovery.parse_env_args(bad)
        assert (caught.value.field, caught.value.value) == ("EvalOptions.env_args", bad)


# -- versions -----------------------------------------------------------------------------------
def test_file_version_changes_with_content_only(tmp_path: Path) -> None:
    path = write_file(tmp_path / "v.py", ADDER_ENV)
    ref = EnvRef("v", "path", path)
    v1 = env_version(ref)
    assert HEX12.match(v1) and env_version(ref) == v1
    path.write_text(path.read_text())  # same bytes, new mtime
    os.utime(path, (1_000_000, 1_000_000))
    assert env_version(ref) == v1
    path.write_text(path.read_text().replace("n: int = 20", "n: int = 21"))
    v2 = env_version(ref)
    assert v2 != v1
    path.write_text(ADDER_ENV.lstrip("\n"))
    assert env_version(ref) == v1


def test_package_version_covers_every_file_but_not_bytecode(tmp_path: Path) -> None:
    pkg = make_package(tmp_path / "pkgs")
    ref = EnvRef("pkgenv", "path", pkg)
    v1 = env_version(ref)
    discovery.load(str(pkg))  # importing may write __pycache__/
    (pkg / "__pycache__").mkdir(exist_ok=True)
    (pkg / "__pycache__" / "junk.cpython-311.pyc").write_bytes(b"\x00bytecode")
    assert env_version(ref) == v1
    (pkg / "data.json").write_text('{"description": "changed"}')
    v2 = env_version(ref)
    assert v2 != v1
    (pkg / "extra.txt").write_text("new file")
    v3 = env_version(ref)
    assert v3 not in (v1, v2)
    (pkg / "extra.txt").rename(pkg / "renamed.txt")
    assert env_version(ref) not in (v1, v2, v3)


def test_loaded_environment_carries_its_version(tmp_path: Path) -> None:
    path = write_file(tmp_path / "carry.py", ADDER_ENV)
    before = discovery.load(str(path)).version
    assert discovery.load(str(path)).version == before
    path.write_text(path.read_text() + "\n# a comment changes the version\n")
    assert discovery.load(str(path)).version != before


# -- `workbench envs` -----------------------------------------------------------------------------
def test_envs_json_lists_bundled_and_user_envs_with_versions(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    user_dir = tmp_path / "user-envs"
    user_env = write_file(user_dir / "my_user_env.py", ADDER_ENV)
    res = cli("envs", "--json", env={"WORKBENCH_ENV_PATH": str(user_dir)})
    assert res.rc == 0, res.stderr
    rows = {r["name"]: r for r in last_json(res.stdout)["envs"]}
    for name, path in bundled_names().items():
        assert name in rows, f"bundled env {name} is not listed"
        assert rows[name]["origin"] == "bundled"
        assert rows[name]["version"] == env_version(EnvRef(name, "bundled", path))
        assert HEX12.match(rows[name]["version"])
    assert rows["my_user_env"]["origin"] == "user"
    assert rows["my_user_env"]["version"] == env_version(EnvRef("my_user_env", "user", user_env))


@pytest.mark.parametrize(("source", "dialect"), [
    (ADDER_ENV, "workbench"),
    ('DIALECT = "openai-eval"\n' + ADDER_ENV, "openai-eval"),
    ("raise RuntimeError('broken')\n", "?"),  # did not load: its files say nothing of a format
])
def test_envs_name_each_environments_dialect(tmp_path: Path, cli: Callable[..., CliResult], source: str,
                                             dialect: str) -> None:
    user_dir = tmp_path / "user-envs"
    write_file(user_dir / "mine.py", source)
    res = cli("envs", "--json", env={"WORKBENCH_ENV_PATH": str(user_dir)})
    assert res.rc == 0, res.stderr
    rows = {r["name"]: r for r in last_json(res.stdout)["envs"]}
    assert rows["mine"]["dialect"] == dialect
    assert rows["arithmetic"]["dialect"] == "workbench"
    table = cli("envs", env={"WORKBENCH_ENV_PATH": str(user_dir)})
    assert re.search(rf"^mine\s+user\s+{re.escape(dialect)}\s", table.stdout, re.M), table.stdout


def test_envs_shows_the_version_runs_store_data_files_included(tmp_path: Path, cli: Callable[..., CliResult],
                                                                 mock_server: Callable[..., MockServer],
                                                                 store_path: Path) -> None:
    """`workbench envs` shows the version a run stores: appending a row to the JSONL file the tasks are read
    from changes it. An environment that does not load shows the hash of its files, and why."""
    data = tmp_path / "data" / "tasks.jsonl"
    data.parent.mkdir()
    data.write_text('{"prompt": "1+1?", "answer": "2"}\n')
    user_dir = tmp_path / "user-envs"
    write_file(user_dir / "rows.py", f'''
        import workbench as wb
        def load_environment(path: str = {str(data)!r}):
            print("loading rows")  # what loading prints stays out of --json
            return wb.Environment(name="rows", tasks=wb.TaskSet.from_jsonl(path), harness=wb.SingleTurn(),
                                  rubric=wb.Rubric())
        ''')
    broken = write_file(user_dir / "broken.py", "def load_environment():\n    raise RuntimeError('no data here')\n")
    env = {"WORKBENCH_ENV_PATH": str(user_dir)}
    mock = mock_server("instant")

    def shown() -> dict[str, dict[str, str]]:
        res = cli("envs", "--json", env=env)
        assert res.rc == 0, res.stderr
        assert "loading rows" not in res.stdout and "loading rows" in res.stderr
        return {r["name"]: r for r in last_json(res.stdout)["envs"]}

    def stored() -> str:
        res = cli("eval", "rows", "--base-url", mock.base_url, "-m", "mock-model", "--json", env=env)
        assert res.rc == 0, res.stderr
        return query(store_path, "SELECT env_version FROM run WHERE id=?", (last_json(res.stdout)["run_id"],))[0][0]

    before = shown()
    assert before["rows"]["version"] == stored() and "error" not in before["rows"]
    assert before["rows"]["version"] != env_version(EnvRef("rows", "user", user_dir / "rows.py"))  # not files only
    with data.open("a") as f:
        f.write('{"prompt": "2+2?", "answer": "4"}\n')
    after = shown()
    assert after["rows"]["version"] != before["rows"]["version"]
    assert after["rows"]["version"] == stored()
    assert after["broken"]["version"] == env_version(EnvRef("broken", "user", broken))
    assert "no data here" in after["broken"]["error"]
    table = cli("envs", env=env)
    assert table.rc == 0 and after["rows"]["version"] in table.stdout and "did not load" in table.stdout


# -- `workbench validate` -------------------------------------------------------------------------
def test_validate_a_sound_env(write_env: Callable[..., Path], cli: Callable[..., CliResult]) -> None:
    res = cli("validate", write_env(ADDER_ENV), "-a", '{"group_bonus": false}', "--json")
    assert res.rc == 0, res.stderr
    rep = last_json(res.stdout)
    assert rep["ok"] is True and rep["problems"] == [] and rep["warnings"] == []
    assert rep["env"] == "adder" and HEX12.match(rep["env_version"])
    assert rep["total_tasks"] == 20 and rep["tasks_checked"] == 20
    assert rep["gold"] == {"correct": 1.0, "total": 1.0}
    assert rep["empty"] == {"correct": 0.0, "total": 0.0}


ALWAYS_ONE_ENV = '''
import workbench as wb


def load_environment():
    rubric = wb.Rubric()

    @rubric.reward
    def always(completion: str) -> float:
        return 1.0

    rows = [{"prompt": f"Name a number above {i}.", "answer": str(i + 1)} for i in range(5)]
    return wb.Environment(name="lenient", tasks=wb.TaskSet.from_records(rows), harness=wb.SingleTurn(),
                          rubric=rubric)
'''


def test_validate_warns_when_an_empty_completion_earns_a_reward(write_env: Callable[..., Path],
                                                                cli: Callable[..., CliResult]) -> None:
    res = cli("validate", write_env(ALWAYS_ONE_ENV), "--json")
    assert res.rc == 0, res.stderr
    rep = last_json(res.stdout)
    assert rep["ok"] is True and rep["problems"] == []
    assert rep["empty"]["always"] == 1.0 and rep["gold"]["always"] == 1.0
    assert any("always" in w and "empty" in w for w in rep["warnings"]), rep["warnings"]


RAISING_ENV = '''
import workbench as wb


def load_environment():
    rubric = wb.Rubric()

    @rubric.reward
    def fragile(completion: str, info: dict) -> float:
        return info["weights"][completion]

    rows = [{"prompt": "Say yes.", "answer": "yes"}]
    return wb.Environment(name="fragile", tasks=wb.TaskSet.from_records(rows), harness=wb.SingleTurn(),
                          rubric=rubric)
'''


def test_validate_fails_when_a_reward_raises(write_env: Callable[..., Path], cli: Callable[..., CliResult]) -> None:
    res = cli("validate", write_env(RAISING_ENV), "--json")
    assert res.rc == 1, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    rep = last_json(res.stdout)
    assert rep["ok"] is False
    assert any("fragile" in p and "KeyError" in p for p in rep["problems"]), rep["problems"]


def test_validate_fails_without_any_reward(write_env: Callable[..., Path], cli: Callable[..., CliResult]) -> None:
    src = ('import workbench as wb\n\n\ndef load_environment():\n    return wb.Environment(name="bare", '
           'tasks=wb.TaskSet.from_records([{"prompt": "hi"}]), harness=wb.SingleTurn())\n')
    res = cli("validate", write_env(src, "bare.py"))
    assert res.rc == 1
    assert "no reward" in res.stderr
    assert "Traceback" not in res.stderr


def test_validate_of_a_broken_file_is_one_clear_line(write_env: Callable[..., Path],
                                                     cli: Callable[..., CliResult]) -> None:
    path = write_env("def load_environment(\n", "half.py")
    assert_user_error(cli("validate", path, "--json"), "half.py:1")


def test_the_version_covers_the_data_files_the_tasks_come_from(tmp_path: Path) -> None:
    """Appending a row to a task file changes the env's version, wherever the file lies; a file inside the
    env's own folder is counted once; where the file lies does not enter the version, what it holds does."""
    data = tmp_path / "data" / "tasks.jsonl"
    data.parent.mkdir()
    data.write_text('{"prompt": "1+1?", "answer": "2"}\n')
    env_file = tmp_path / "envs" / "fromfile.py"
    env_file.parent.mkdir()
    env_file.write_text(
        "import workbench as wb\n\n"
        "def load_environment(path: str):\n"
        "    tasks = wb.TaskSet.from_jsonl(path).shuffle(1)[:5]\n"
        "    return wb.Environment(name='fromfile', tasks=tasks, harness=wb.SingleTurn(), rubric=wb.Rubric())\n")
    v1 = discovery.load(str(env_file), {"path": str(data)}).version
    assert discovery.load(str(env_file), {"path": str(data)}).version == v1
    with data.open("a") as f:
        f.write('{"prompt": "2+2?", "answer": "4"}\n')
    v2 = discovery.load(str(env_file), {"path": str(data)}).version
    assert v2 != v1
    moved = tmp_path / "elsewhere" / "tasks.jsonl"
    moved.parent.mkdir()
    moved.write_bytes(data.read_bytes())
    assert discovery.load(str(env_file), {"path": str(moved)}).version == v2


def test_validate_prints_the_environments_names_as_text(write_env: Callable[..., Path],
                                                        cli: Callable[..., CliResult]) -> None:
    """An environment's name is its author's string: Rich markup in it is printed as written, never read."""
    source = ADDER_ENV.replace('name="adder"', 'name="add[red]er[/red]"')
    res = cli("validate", write_env(source), "-a", '{"group_bonus": false}', "--no-probe")
    assert res.rc == 0, res.stderr
    assert "add[red]er[/red] (" in res.stdout, res.stdout


@pytest.mark.parametrize("spec", ["openenv+http://127.0.0.1:9", "openenv+docker:echo-env:latest"])
def test_what_a_format_reads_is_named_again_by_its_spec(spec: str) -> None:
    ref = discovery.resolve(spec)
    assert ref.format == "openenv" and ref.spec == spec
    assert discovery.resolve(ref.spec) == ref


def test_a_user_env_folder_lists_a_harbor_task_by_its_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    shutil.copytree(Path(__file__).parents[1] / "formats" / "harbor_tasks" / "hello", tmp_path / "envs" / "hello")
    write_file(tmp_path / "envs" / "mine.py", ADDER_ENV)
    monkeypatch.setenv("WORKBENCH_ENV_PATH", str(tmp_path / "envs"))
    refs = {r.name: r for r in discovery.discover() if r.origin == "user"}
    assert refs["hello"].format == "harbor" and refs["hello"].spec == str(tmp_path / "envs" / "hello")
    assert refs["mine"].format is None
    assert discovery.resolve("hello") == refs["hello"]
