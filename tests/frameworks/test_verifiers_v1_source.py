"""Which sources are verifiers 0.4 (v1) environments, decided without importing them (verifiers 0.4 cannot be
imported into Workbench's interpreter): table-driven over real files, plus the one-line refusals of what
Workbench does not run (those start verifiers' own environment, so they are slow)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO, assert_user_error, write_file
from workbench.frameworks.verifiers_v1 import FORMAT

ENVS = Path(__file__).resolve().parent / "v1_envs"

_TASKSET = textwrap.dedent('''
    import verifiers.v1 as vf


    class Words(vf.Taskset):
        def load(self):
            return [vf.Task(vf.TaskData(prompt="Say hi."))]
''')

#: (case, files to write under the case's folder, what to name, whether it is claimed)
SOURCES: list[tuple[str, dict[str, str], str, bool]] = [
    ("package exporting its Taskset", {"pkg/__init__.py": _TASKSET + '\n__all__ = ["Words"]\n'}, "pkg", True),
    ("one file", {"words_env.py": _TASKSET + '\n__all__ = ["Words"]\n'}, "words_env.py", True),
    ("vf-init layout", {"lay/__init__.py": 'from lay.taskset import Words\n\n__all__ = ["Words"]\n',
                        "lay/taskset.py": _TASKSET}, "lay", True),
    ("relative import", {"rel/__init__.py": 'from .taskset import Words\n\n__all__ = ["Words"]\n',
                         "rel/taskset.py": _TASKSET}, "rel", True),
    ("pyproject requires verifiers 0.4", {"proj/pyproject.toml": '[project]\nname = "proj"\n'
                                          'dependencies = ["verifiers>=0.4.0"]\n',
                                          "proj/__init__.py": 'from proj.things import Thing\n\n__all__ = ["Thing"]\n',
                                          "proj/things.py": "class Thing: ...\n"}, "proj", True),
    ("pyproject requires verifiers 0.3", {"old/pyproject.toml": '[project]\nname = "old"\n'
                                          'dependencies = ["verifiers==0.3.1"]\n',
                                          "old/__init__.py": 'from old.things import Thing\n\n__all__ = ["Thing"]\n',
                                          "old/things.py": "class Thing: ...\n"}, "old", False),
    ("no __all__", {"noall/__init__.py": _TASKSET}, "noall", False),
    ("__all__ without a Taskset", {"notask/__init__.py": _TASKSET + '\ndef helper(): ...\n\n__all__ = ["helper"]\n'},
     "notask", False),
    ("a Taskset of another library", {"other/__init__.py": "from mylib import Taskset\n\n\nclass Words(Taskset):\n"
                                      "    pass\n\n\n__all__ = ['Words']\n"}, "other", False),
    ("a syntax error", {"broken/__init__.py": "import verifiers.v1 as vf\n__all__ = [\n"}, "broken", False),
    ("a Workbench environment", {"wb_env.py": "import workbench as wb\n\n\ndef load_environment(): ...\n"},
     "wb_env.py", False),
    ("a module exporting a v1 import it does not define", {"reexp/__init__.py": "from verifiers.v1 import Taskset\n\n"
                                                           "__all__ = ['Taskset']\n"}, "reexp", False),
]


@pytest.mark.parametrize(("case", "files", "name", "claimed"), SOURCES, ids=[c[0] for c in SOURCES])
def test_which_sources_are_v1_environments(tmp_path: Path, case: str, files: dict[str, str], name: str,
                                           claimed: bool) -> None:
    for rel, text in files.items():
        write_file(tmp_path / rel, text)
    where = FORMAT.claims(str(tmp_path / name))
    assert (where is not None) is claimed, case
    if claimed:
        assert where == (tmp_path / name).resolve()
        assert FORMAT.env_name(where) == Path(name).stem


@pytest.mark.parametrize("spec", [
    str(REPO / "tests" / "fixtures" / "verifiers_envs" / "vf_single.py"),  # verifiers' legacy API: its adapter's
    "json", "no_such_module_anywhere", "wordle", "a/b/c.py", "os.path",
])
def test_legacy_environments_modules_and_names_are_not_claimed(spec: str) -> None:
    assert FORMAT.claims(spec) is None


def test_the_test_environments_are_claimed() -> None:
    for env in ("v1_single", "v1_tools", "v1_game", "v1_group", "v1_raising"):
        assert FORMAT.claims(str(ENVS / env)) == ENVS / env


# -- what Workbench does not run: one line each -----------------------------------------------------------
_PINNED = '''
    import verifiers.v1 as vf


    class Words(vf.Taskset):
        def load(self):
            return [vf.Task(vf.TaskData(prompt="Say hi."))]


    class PinnedConfig(vf.EnvConfig):
        agent: vf.AgentConfig = vf.AgentConfig({pin})


    class PinnedEnv(vf.Env[PinnedConfig]):
        async def run(self, task, agents):
            await agents.agent.run(task)


    __all__ = ["PinnedEnv", "Words"]
'''
_EMPTY = '''
    import verifiers.v1 as vf


    class Nothing(vf.Taskset):
        def load(self):
            return []


    __all__ = ["Nothing"]
'''
REFUSED = [
    ("prime sandbox", _PINNED.replace("{pin}", 'runtime={"type": "prime"}'),
     ("Prime Intellect's cloud sandboxes", "'agent'", "does not run")),
    ("acp harness", _PINNED.replace("{pin}", 'harness={"id": "claude_code"}'),
     ("ACP harness", "'claude_code'", "does not run")),
    ("no tasks", _EMPTY, ("Nothing", "yields no tasks")),
]


@pytest.mark.slow  # starts verifiers' own environment (built once per machine)
@pytest.mark.parametrize(("case", "source", "fragments"), REFUSED, ids=[c[0] for c in REFUSED])
def test_what_workbench_does_not_run_is_refused_in_one_line(case: str, source: str, fragments: tuple[str, ...],
                                                             tmp_path: Path, cli: Callable[..., Any]) -> None:
    from workbench.frameworks.venvs import frameworks_dir
    from workbench.frameworks.verifiers_v1 import FRAMEWORK

    FRAMEWORK.ensure()
    folder = tmp_path / "envs" / "refused_env"
    write_file(folder / "__init__.py", textwrap.dedent(source))
    res = cli("eval", folder, "--base-url", "http://127.0.0.1:9/v1", "-m", "m", "-n", "1",
              env={"WORKBENCH_FRAMEWORKS_DIR": str(frameworks_dir())}, timeout=300)
    line = assert_user_error(res, "refused_env", *fragments)
    assert "Traceback" not in line


@pytest.mark.parametrize(("name", "fragment"), [("harbor", "built-in tasksets"), ("2fast", "not a Python module name")])
def test_a_name_verifiers_would_import_otherwise_is_refused_before_any_worker(tmp_path: Path, name: str,
                                                                              fragment: str) -> None:
    from workbench.errors import EnvLoadError

    folder = tmp_path / name
    write_file(folder / "__init__.py", _TASKSET + '\n__all__ = ["Words"]\n')
    where = FORMAT.claims(str(folder))
    assert where is not None
    with pytest.raises(EnvLoadError, match=fragment):
        FORMAT.load(where, {})
