"""The model endpoint a run talks to, as one frozen value resolved once from what the user named: a
registered model (``workbench models``), a ``base_url`` with a model id, or the embedded model server
(``workbench.endpoints``). Every command that talks to a model resolves its endpoint here."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard, runtime_checkable

from workbench.errors import ConfigError, EndpointFieldError, OptionError
from workbench.rollouts.client import api_key_source
from workbench.store.prices import Price

#: ``on_status(what, done, total)``: what a run waits for before its rollouts start (the embedded
#: model being built or started); ``done``/``total`` are None when there is no count to show.
StatusCallback = Callable[[str, int | None, int | None], None]


@runtime_checkable
class ModelServer(Protocol):
    """What a ``workbench.endpoints`` plugin names: the model server used when no base URL is given. It may
    also have ``check(model)``, which refuses a model it could not load without loading it."""

    def ensure(self, model: str | None = None, *, progress: StatusCallback | None = None) -> tuple[str, str]:
        """(base URL ending in /v1, model id) of a healthy server for ``model``, started if need be."""
        ...


def is_model_server(found: object) -> TypeGuard[ModelServer]:
    return isinstance(found, ModelServer)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a model is served and how to talk to it. Its key is held but never shown (``repr``) nor
    compared: ``key_source`` says where it came from."""

    base_url: str
    model: str  # the model id the endpoint serves
    provider: str = "openai"  # the API it speaks (a registered model's; see workbench models)
    key_source: str = ""  # where its key comes from ("given", "$OPENAI_API_KEY", "workbench login anthropic"); "" none
    price: Price | None = None  # a registered model's own price, over the store's table
    name: str | None = None  # what the user called the model: a registered name, or the spec a server resolved
    api_key: str | None = field(default=None, repr=False, compare=False)


def resolve_endpoint(model: str | None = None, base_url: str | None = None, api_key: str | None = None,
                     on_status: StatusCallback | None = None, *, model_field: str = "EvalOptions.model",
                     url_field: str = "EvalOptions.base_url") -> Endpoint:
    """The endpoint ``model`` names: at ``base_url`` when one is given (the model id is ``model`` or
    ``$WORKBENCH_MODEL``); else a registered model of that name; else the embedded model server
    (``on_status`` hears about its first build and start). ``api_key`` given wins over every other source.
    ``model_field`` and ``url_field`` are the fields an error names (the options ``model`` and ``base_url``
    came from)."""
    if base_url:
        url = base_url.rstrip("/")
        model_id = model or os.environ.get("WORKBENCH_MODEL")
        if not model_id:
            raise OptionError(model_field, None, template="{base_url} needs a model name too: give {field}",
                              names={"base_url": url_field})
        return _with_key(url, model_id, api_key, name=model)
    found = _registered(model, api_key)
    if found is not None:
        return found
    from workbench import plugins

    try:
        server = plugins.load("endpoints", "embedded", is_model_server)
    except plugins.PluginError as e:
        raise EndpointFieldError(url_field, None, template="no {field} given and the embedded model "
                                 "server cannot start here ({why}); or give {field} and {model}", why=e,
                                 names={"model": model_field}) from None
    url, model_id = server.ensure(model, progress=on_status)
    return _with_key(url, model_id, api_key, name=model)


def _with_key(url: str, model_id: str, given: str | None, *, name: str | None, provider: str = "openai",
              price: Price | None = None) -> Endpoint:
    key, source = api_key_source(given, url)
    return Endpoint(url, model_id, provider, source, price, name, key)


def is_registered(name: Any) -> bool:
    """Whether ``name`` is a registered model's name."""
    from workbench.config.models import load_models

    return isinstance(name, str) and bool(name) and name in load_models()


def _registered(name: str | None, api_key: str | None) -> Endpoint | None:
    """The endpoint of a registered model (``workbench models add``): its URL, id, API, key and price. A
    name that is no registered model but close to one is a typo: refused with the nearest names (anything
    else is the embedded server's to resolve: a model id or a path)."""
    import difflib

    from workbench.config.models import load_models, unknown_model_message

    if not name:
        return None
    models = load_models()
    m = models.get(name)
    if m is None:
        if difflib.get_close_matches(name, list(models), n=1, cutoff=0.8) and not os.path.exists(name):
            raise ConfigError(unknown_model_message(name, models))
        return None
    if m.api_key_env and not m.api_key() and api_key is None:
        raise ConfigError(f"model {m.name!r} takes its key from ${m.api_key_env}, which is not set")
    price = Price(m.model_id, m.provider, m.input_price, m.output_price, source=f"models add {m.name}") \
        if m.input_price is not None and m.output_price is not None else None
    if not api_key and m.api_key():
        return Endpoint(m.base_url, m.model_id, m.provider, f"${m.api_key_env}", price, name, m.api_key())
    return _with_key(m.base_url, m.model_id, api_key, name=name, provider=m.provider, price=price)
