"""``workbench import-eval openai``: an OpenAI eval, one of its runs and its items as a Workbench environment
folder. Everything is checked first; the folder is written beside its target and moved into place whole, so
a refused definition leaves nothing behind."""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from workbench.formats.openai_evals.environment import (
    DATA_FILE,
    DIALECT,
    EVAL_FILE,
    RUN_FILE,
    read_definition,
    tasks_of,
)
from workbench.formats.openai_evals.errors import EvalDefinitionError
from workbench.formats.openai_evals.graders import judge_models
from workbench.fsutil import staged_folder

_INIT = '''"""An OpenAI eval imported by `workbench import-eval openai`; docs/formats/openai-evals.md says what maps to what.

The definition is kept as OpenAI wrote it beside this file: eval.json (the eval object and its graders),
run.json (the run object: the prompt template, the model and its sampling) and data.jsonl (the items).
Each grader is a reward named as the grader, 1 when it passes and 0 when it fails; its raw score is the
metric <name>.score. Edit those files, not this one, to change the eval.
"""

from __future__ import annotations

from pathlib import Path

import workbench as wb
from workbench.formats.openai_evals.environment import build_environment

DIALECT = {dialect!r}
EVAL_NAME = {eval_name!r}
#: The model the run sampled on OpenAI's side (``workbench eval -m`` picks the model here).
RUN_MODEL = {run_model!r}
#: The registered model that judges the score_model and label_model graders; None: the registered model
#: named as each grader's own model.
JUDGE = {judge!r}


def load_environment(judge: str | None = JUDGE) -> wb.Environment:
    return build_environment(Path(__file__).resolve().parent, judge=judge)
'''


@dataclass(frozen=True, slots=True)
class ImportResult:
    """What ``import-eval`` wrote: the folder, the eval's name, its tasks and graders, the judge models."""

    path: str
    name: str
    dialect: str
    tasks: int
    graders: list[dict[str, str]]
    judge_models: list[str]
    judge: str | None
    run_model: str | None
    reported: dict[str, float]  # the pass rate of each grader the run reported on OpenAI's side, to compare

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def import_eval(eval_path: str | Path, run_path: str | Path, data_path: str | Path, out: str | Path, *,
                judge: str | None = None) -> ImportResult:
    """Check the definition and write the environment folder ``out`` (absent or empty). Nothing is written
    when anything is refused."""
    paths = [Path(p).expanduser() for p in (eval_path, run_path, data_path)]
    defn = read_definition(*paths, labels=(str(eval_path), str(run_path), str(data_path)))
    tasks = tasks_of(defn)
    target = Path(out).expanduser().resolve()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise EvalDefinitionError(f"{out} exists and is not an empty folder; nothing was written")
    try:
        with staged_folder(target) as staging:
            for src, name in zip(paths, (EVAL_FILE, RUN_FILE, DATA_FILE), strict=True):
                shutil.copyfile(src, staging / name)
            (staging / "__init__.py").write_text(_INIT.format(dialect=DIALECT, eval_name=defn.name,
                                                              run_model=defn.model, judge=judge), encoding="utf-8")
    except OSError as e:
        raise EvalDefinitionError(f"cannot write {out} ({e.strerror or e}); nothing was written") from None
    return ImportResult(str(target), defn.name, DIALECT, len(tasks),
                        [{"name": g["name"], "type": g["type"]} for g in defn.graders],
                        judge_models(defn.graders), judge, defn.model, defn.reported)
