"""Other frameworks' formats, as the command line and the app both use them: an environment exported as a
verifiers package (``workbench export-env``), an OpenAI eval imported as an environment folder
(``workbench import-eval openai``). Each returns the domain's result and the lines that say what happened,
as plain text; a refusal is the domain's one-line error, raised before anything is written."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.formats.openai_evals.writer import ImportResult
    from workbench.formats.verifiers_export.package import Exported


def export_env_package(env: str, out: str | Path, env_args: dict[str, Any] | None = None,
                       name: str | None = None) -> Exported:
    """Write the environment ``env`` (as ``workbench eval`` names one) as a verifiers package in the new or
    empty folder ``out``."""
    from workbench.formats.verifiers_export import export_verifiers

    return export_verifiers(env, out, env_args or {}, name)


def export_lines(done: Exported) -> list[str]:
    """What an export wrote, then how to install and score the package."""
    return [f"{done.env} exported to {done.path} as the verifiers package {done.package} "
            f"({done.tasks} tasks, {done.harness})",
            f"  pip install {done.path} && vf-eval {done.package} -m MODEL"]


def import_openai_eval(eval_file: str | Path, run_file: str | Path, data_file: str | Path, out: str | Path,
                       judge: str | None = None) -> ImportResult:
    """Write the environment folder ``out`` (absent or empty) from an OpenAI eval, one of its runs and its items."""
    from workbench.formats.openai_evals import import_eval

    return import_eval(eval_file, run_file, data_file, out, judge=judge)


def import_lines(res: ImportResult) -> list[str]:
    """What an import wrote, the judge its model graders ask, the pass rates OpenAI reported, how to run it."""
    graders = ", ".join(f"{g['name']} ({g['type']})" for g in res.graders)
    lines = [f"wrote {res.path}: {res.name}, {res.tasks:,} tasks, graders: {graders}"]
    if res.judge_models:
        who = res.judge or ", ".join(res.judge_models)
        lines.append(f"model graders ask the registered model {who} (workbench models add; "
                     "-a '{\"judge\": \"NAME\"}' picks another)")
    if res.reported:
        rates = ", ".join(f"{name} {rate:.3f}" for name, rate in res.reported.items())
        lines.append(f"OpenAI's run reported pass rates: {rates} (rewards.NAME of `workbench eval` compares)")
    return lines
