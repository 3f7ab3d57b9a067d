"""``workbench import-eval openai EVAL.json --run RUN.json --data DATA.jsonl -o DIR``: an OpenAI eval as an
environment folder."""

from __future__ import annotations

from pathlib import Path

import click
from rich.text import Text

from workbench.cli.common import console, emit_json, json_option


@click.command("import-eval")
@click.argument("dialect", type=click.Choice(["openai"]))
@click.argument("eval_file", metavar="EVAL.json", type=click.Path(path_type=Path))
@click.option("--run", "run_file", required=True, type=click.Path(path_type=Path),
              help="The run object (its data_source: the input_messages template, the model, sampling_params).")
@click.option("--data", "data_file", required=True, type=click.Path(path_type=Path),
              help="The items, one {\"item\": {...}} a line.")
@click.option("-o", "--out", "out", required=True, type=click.Path(path_type=Path),
              help="The environment folder to write (absent or empty).")
@click.option("--judge", default=None,
              help="The registered model that judges score_model and label_model graders (default: the "
                   "registered model named as each grader's model; -a '{\"judge\": ...}' overrides it per run).")
@json_option()
def import_eval_command(dialect: str, eval_file: Path, run_file: Path, data_file: Path, out: Path,
                        judge: str | None, as_json: bool) -> None:
    """Write an environment from an OpenAI eval (EVAL.json: the eval object with its testing_criteria), one of
    its runs and its items.

    Tasks are the items prompted by the run's template; each grader is a reward named as the grader, 1 when
    it passes and 0 when it fails (its mean is the Evals dashboard's pass rate), with its raw score as the
    metric NAME.score. Nothing is written when the definition is refused.
    """
    from workbench.usecases.formats import import_lines, import_openai_eval

    res = import_openai_eval(eval_file, run_file, data_file, out, judge=judge)
    if as_json:
        emit_json(res.as_dict())
        return
    for line in import_lines(res):
        console.print(Text(line))
    console.print(Text(f"  workbench eval {res.path} -m MODEL"), style="dim")


COMMANDS = [import_eval_command]
