"""``workbench models``: models as named endpoints (the use cases in workbench/usecases/models.py, which the
app's Settings screen calls too)."""

from __future__ import annotations

import click

from workbench.cli.common import console, emit_json, json_option
from workbench.cli.tables import Col, print_table

#: ``models list``'s columns: names, ids, URLs and prices whole; at a narrow width the prices go first, then
#: the provider, where the key comes from and the base URL.
MODEL_COLUMNS = (Col("name", keep=True), Col("model id", keep=True), Col("provider", drop=3),
                 Col("base url", keep=True, drop=1), Col("key from", keep=True, drop=2),
                 Col("$/Mtok in", keep=True, justify="right", drop=4),
                 Col("$/Mtok out", keep=True, justify="right", drop=4))


@click.group("models")
def models_group() -> None:
    """Models as named endpoints: `models add NAME --base-url URL`, then `-m NAME` on any command that samples."""


@models_group.command("add")
@click.argument("name")
@click.option("--base-url", required=True, help="The endpoint, e.g. https://api.openai.com/v1.")
@click.option("--model-id", default=None, help="The model id the endpoint serves (default: NAME).")
@click.option("--provider", default="openai", show_default=True,
              help="The API: openai (chat completions; also Gemini's and OpenRouter's compatible endpoints) or "
                   "anthropic (the Messages API).")
@click.option("--api-key-env", default=None, help="The environment variable that holds its key (never stored).")
@click.option("--input-price", type=float, default=None, help="USD per million prompt tokens.")
@click.option("--output-price", type=float, default=None, help="USD per million completion tokens.")
@click.option("--replace", is_flag=True, help="Replace a model of the same name.")
@json_option()
def models_add(name: str, base_url: str, model_id: str | None, provider: str, api_key_env: str | None,
               input_price: float | None, output_price: float | None, replace: bool, as_json: bool) -> None:
    """Register NAME: where it is served, its id there, its API, where its key is."""
    from workbench.usecases.models import add_model

    m = add_model(name, base_url=base_url, model_id=model_id, provider=provider, api_key_env=api_key_env,
                  input_price=input_price, output_price=output_price, replace=replace)
    if as_json:
        emit_json({"model": m.as_dict()})
        return
    console.print(f"registered {m.name}: {m.model_id} at {m.base_url} ({m.provider}); use `-m {m.name}`",
                  highlight=False)


@models_group.command("list")
@json_option()
def models_list(as_json: bool) -> None:
    """List the registered models."""
    from workbench.usecases.models import list_models, models_path

    models = list_models()
    if as_json:
        emit_json({"models": [m.as_dict() for m in models.values()], "path": str(models_path())})
        return
    if not models:
        console.print("no models registered: `workbench models add NAME --base-url URL [--model-id ID]`")
        return
    rows = [(m.name, m.model_id, m.provider, m.base_url, f"${m.api_key_env}" if m.api_key_env else "keyring",
             "-" if m.input_price is None else f"{m.input_price:.3f}",
             "-" if m.output_price is None else f"{m.output_price:.3f}") for m in models.values()]
    print_table(MODEL_COLUMNS, rows, console)


@models_group.command("remove")
@click.argument("name")
@json_option()
def models_remove(name: str, as_json: bool) -> None:
    """Forget NAME (its key, wherever it is, stays there)."""
    from workbench.usecases.models import remove_model

    gone = remove_model(name)
    if as_json:
        emit_json({"removed": gone.name})
        return
    console.print(f"removed {gone.name}", highlight=False)


@models_group.command("test")
@click.argument("name")
@json_option()
def models_test(name: str, as_json: bool) -> None:
    """Call NAME once (one short chat completion, no retries): whether it answers, and how fast. When it cannot
    be called, the reason is one line and the exit status is not 0."""
    from workbench.errors import EndpointError
    from workbench.usecases.models import check_model

    check = check_model(name)
    if as_json:
        emit_json({"check": check.as_dict()})
        if not check.ok:
            raise SystemExit(1)
        return
    if not check.ok:
        raise EndpointError(check.line())
    console.print(check.line(), highlight=False, markup=False)


COMMANDS = [models_group]
