"""Models as named endpoints: ``workbench models add NAME --base-url URL ...``, then ``-m NAME`` anywhere.

The registry is ``<XDG config>/workbench/models.json``: per name the endpoint's URL, the model id it
serves, its API (``openai``: chat completions, which Gemini's and OpenRouter's compatible endpoints speak
too; ``anthropic``: the Messages API), the environment variable that holds its key, and optional prices
(USD per million tokens). Keys are never written here: they stay in that variable or in the keyring
(``workbench login PROVIDER``).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from workbench.config import paths
from workbench.config.redact import redact_url, url_credentials
from workbench.errors import ConfigError, NotFoundError, OptionError
from workbench.fsutil import atomic_write

MODELS_FILE = "models.json"
PROVIDERS = ("openai", "anthropic")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,79}$")
_ENV_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ModelEndpoint(BaseModel):
    """One named model: where it is served and how to talk to it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    base_url: str
    model_id: str
    provider: Literal["openai", "anthropic"] = "openai"
    api_key_env: str | None = None
    input_price: float | None = None  # USD per million prompt tokens
    output_price: float | None = None  # USD per million completion tokens

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("use letters, digits and . _ - : @ / (at most 80 characters), starting with a letter "
                             "or digit")
        return v

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"^https?://[^\s/]+", v):
            raise ValueError("must be an http:// or https:// URL, e.g. https://api.openai.com/v1")
        found = url_credentials(v)
        if found:
            raise ValueError(f"{redact_url(v)!r} holds a credential ({', '.join(dict.fromkeys(found))}); a URL is "
                             "stored and printed, so the key goes in an environment variable (--api-key-env VAR) "
                             "or `workbench login PROVIDER`")
        return v.rstrip("/")

    @field_validator("model_id")
    @classmethod
    def _model_id(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v.strip()

    @field_validator("api_key_env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        if v is not None and not _ENV_VAR.match(v):
            raise ValueError("must be an environment variable name, e.g. OPENAI_API_KEY")
        return v

    @field_validator("input_price", "output_price")
    @classmethod
    def _price(cls, v: float | None) -> float | None:
        if v is not None and not (v >= 0):
            raise ValueError("must be a non-negative number of USD per million tokens")
        return v

    def api_key(self) -> str | None:
        """The key from ``api_key_env`` (None when it names no variable or the variable is unset)."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump()


def models_path() -> Path:
    return paths.config_dir() / MODELS_FILE


def load_models(path: Path | None = None) -> dict[str, ModelEndpoint]:
    """Every registered model, by name ({} when none is). A broken file is one :class:`ConfigError`."""
    p = path or models_path()
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise ConfigError(f"the model registry {p} cannot be read ({e}); fix or remove it") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"the model registry {p} must hold an object of models by name")
    out: dict[str, ModelEndpoint] = {}
    for name, entry in raw.items():
        try:
            out[name] = ModelEndpoint(**{**(entry if isinstance(entry, dict) else {}), "name": name})
        except (ValidationError, TypeError) as e:
            raise ConfigError(f"the model registry {p}: model {name!r} is invalid ({_first_error(e)})") from None
    return out


def save_models(models: dict[str, ModelEndpoint], path: Path | None = None) -> Path:
    """Write the registry at once (a temp file renamed over it, so a crash never leaves half a file)."""
    p = path or models_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    body = {n: {k: v for k, v in m.as_dict().items() if k != "name" and v is not None} for n, m in sorted(models.items())}
    atomic_write(p, json.dumps(body, indent=2) + "\n")
    return p


def add_model(name: str, *, base_url: str, model_id: str | None = None, provider: str = "openai",
              api_key_env: str | None = None, input_price: float | None = None, output_price: float | None = None,
              replace: bool = False, path: Path | None = None) -> ModelEndpoint:
    if provider not in PROVIDERS:
        raise OptionError("ModelEndpoint.provider", provider, f"one of {', '.join(PROVIDERS)}",
                          "{field} {value!r}: use {allowed}")
    if (input_price is None) != (output_price is None):
        raise OptionError("ModelEndpoint.input_price", input_price, template="give both {field} and {output} (USD per "
                          "million tokens), or neither", names={"output": "ModelEndpoint.output_price"})
    try:
        entry = ModelEndpoint(name=name, base_url=base_url, model_id=model_id or name, provider=provider,  # type: ignore[arg-type]
                              api_key_env=api_key_env, input_price=input_price, output_price=output_price)
    except ValidationError as e:
        raise ConfigError(f"model {name!r}: {_first_error(e)}") from None
    models = load_models(path)
    if name in models and not replace:
        raise ConfigError(f"a model named {name!r} is registered already ({models[name].base_url}); "
                          "`workbench models remove` it first or pass --replace")
    models[name] = entry
    save_models(models, path)
    return entry


def remove_model(name: str, path: Path | None = None) -> ModelEndpoint:
    models = load_models(path)
    if name not in models:
        raise NotFoundError(unknown_model_message(name, models))
    gone = models.pop(name)
    save_models(models, path)
    return gone


def unknown_model_message(name: str, models: dict[str, ModelEndpoint]) -> str:
    near = difflib.get_close_matches(name, list(models), n=3, cutoff=0.5)
    if near:
        return f"no model named {name!r} is registered; did you mean {', '.join(repr(n) for n in near)}?"
    if models:
        return f"no model named {name!r} is registered (registered: {', '.join(sorted(models))})"
    return f"no model named {name!r} is registered (none is: `workbench models add NAME --base-url URL`)"


def registered(name: str | None) -> ModelEndpoint | None:
    """The registered model ``name`` names, or None (an unregistered name is a model id as it is)."""
    if not name:
        return None
    return load_models().get(name)


def _first_error(e: Exception) -> str:
    if isinstance(e, ValidationError):
        err = e.errors()[0]
        where = ".".join(str(x) for x in err.get("loc", ()))
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        return f"{where}: {msg}" if where else msg
    return str(e)
