"""The requirements a framework environment's package declares besides the framework (``package_deps``): read
from its ``pyproject.toml`` or ``requirements.txt`` without running anything, and installed in the framework's
environment beside it. Table-driven over real files, then one real legacy and one real v1 environment each
importing a package that verifiers does not bring (built by uv on first use: slow)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.helpers import write_file
from workbench.errors import EnvLoadError
from workbench.frameworks import package_deps

#: (what the package declares, in which file, its other requirements)
DECLARED = [
    (None, None, ()),
    ('["verifiers==0.3.1"]', "pyproject.toml", ()),
    ('["datasets>=2", "Verifiers==0.3.0", "text_unidecode==1.3"]', "pyproject.toml",
     ("datasets>=2", "text_unidecode==1.3")),
    ('["math-verify[antlr4_13_2]>=0.8 ; python_version >= \'3.10\'"]', "pyproject.toml",
     ('math-verify[antlr4_13_2]>=0.8; python_version >= "3.10"',)),
    ("verifiers==0.3.1  # pinned\n# a comment\n\nrequests\n", "requirements.txt", ("requests",)),
]


@pytest.mark.parametrize(("deps", "where", "expected"), DECLARED)
def test_the_other_requirements_are_read(tmp_path: Path, deps: str | None, where: str | None,
                                         expected: tuple[str, ...]) -> None:
    pkg = tmp_path / "my_env"
    write_file(pkg / "__init__.py", "import verifiers\n")
    if where == "pyproject.toml":
        write_file(pkg / where, f'[project]\nname = "my-env"\nversion = "0.1"\ndependencies = {deps}\n')
    elif where is not None:
        write_file(pkg / where, deps or "")
    assert package_deps.others(pkg, "verifiers") == expected


#: (a line that is not a plain requirement, in requirements.txt)
REFUSED = ["-e .", "--index-url https://example.invalid/simple", "-r more.txt",
           "pkg @ https://example.invalid/pkg.whl", "./local-folder", "not a requirement !"]


@pytest.mark.parametrize("line", REFUSED)
def test_a_line_that_is_not_a_plain_requirement_is_refused_naming_the_file(tmp_path: Path, line: str) -> None:
    pkg = tmp_path / "my_env"
    write_file(pkg / "__init__.py", "import verifiers\n")
    write_file(pkg / "requirements.txt", f"verifiers==0.3.1\n{line}\n")
    with pytest.raises(EnvLoadError) as e:
        package_deps.others(pkg, "verifiers")
    message = str(e.value)
    assert str(pkg / "requirements.txt") in message and repr(line) in message and "\n" not in message
    assert "nothing was installed" in message


LEGACY_WITH_A_DEPENDENCY = '''
import verifiers as vf
from datasets import Dataset
from text_unidecode import unidecode

def load_environment():
    ds = Dataset.from_list([{"question": unidecode("caf\\u00e9"), "answer": "cafe"}])
    return vf.SingleTurnEnv(dataset=ds, rubric=vf.Rubric(funcs=[lambda completion: 1.0]))
'''

V1_WITH_A_DEPENDENCY = '''
import verifiers.v1 as vf
from text_unidecode import unidecode


class Data(vf.TaskData):
    answer: str = ""


class Words(vf.Taskset):
    def load(self):
        return [vf.Task(Data(prompt=unidecode("caf\\u00e9"), answer="cafe"), self.config.task)]


__all__ = ["Words"]
'''


@pytest.mark.slow
@pytest.mark.parametrize("generation", ["legacy", "v1"])
def test_an_environment_imports_what_its_package_declares(tmp_path: Path, generation: str) -> None:
    from workbench.authoring import discovery

    pkg = tmp_path / f"dep_{generation}"
    verifiers = "verifiers==0.3.1" if generation == "legacy" else "verifiers>=0.4"
    write_file(pkg / "pyproject.toml", f'[project]\nname = "dep-{generation}"\nversion = "0.1"\n'
               f'dependencies = ["{verifiers}", "text-unidecode==1.3"]\n')
    source = LEGACY_WITH_A_DEPENDENCY if generation == "legacy" else V1_WITH_A_DEPENDENCY
    write_file(pkg / "__init__.py", textwrap.dedent(source))
    env = discovery.load(str(pkg), {})
    try:
        (task,) = env.tasks.materialize()
        text = task.prompt if isinstance(task.prompt, str) else task.prompt[-1]["content"]
        assert text == "cafe" and env.dialect == f"verifiers {generation}"
    finally:
        env.harness.bridge.close()
