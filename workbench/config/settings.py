"""Workbench's settings: one model, read from the environment and the settings file.

The file is ``<XDG config>/workbench/tui.toml`` (optional; the app and the CLI read the same one)::

    theme = "textual-dark"          # the app's dark theme; `ctrl+t` toggles to light_theme
    light_theme = "textual-light"
    base_url = "http://127.0.0.1:8000/v1"   # the app's quick-eval endpoint (else the embedded model)
    model = "my-model"
    quick_eval_n = 5
    export_dir = "~/workbench-exports"
    gpu_prices = "~/gpu_prices.json"        # the GPU price overrides (default: beside this file)

    [keymap]                        # the app's bindings: binding id = keys (comma separated)
    "screen.environments" = "f1"

    user_name = "ada"               # who plays a wb.Human rollout (stored with it); default: the login name

    [models]                        # the registered model (`workbench models`) each use calls; unset: model/base_url
    quick_eval = "gpt-small"
    play_user = "gpt-small"         # Play's simulated user
    debugger = "local-qwen"

    [budget]                        # monthly spend limit: launches are refused past it
    monthly_usd = 50.0

    [hub]                           # package indexes environments are shared through (`workbench hub`)
    default = "company"
    [hub.indexes.company]
    url = "https://pypi.company.example/simple/"   # its simple index; credentials: `workbench login index company`
    [hub.indexes.public]
    url = "https://pypi.org/simple/"

Environment variables win over the file: ``WORKBENCH_BASE_URL``, ``WORKBENCH_MODEL``,
``WORKBENCH_GPU_PRICES``, ``WORKBENCH_EXPORT_DIR``. Where files live (the store, the user env folders)
is :mod:`workbench.config.paths`.

:func:`load_settings` with ``strict=True`` (the CLI) turns a bad value into one clear
:class:`ConfigError`; without it (the app) a bad value is dropped, the default used, and the problem
listed in ``Settings.problems`` for the app to show.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from workbench.config import paths
from workbench.errors import ConfigError

SETTINGS_FILE = "tui.toml"


class Budget(BaseModel):
    model_config = ConfigDict(extra="ignore")

    monthly_usd: float | None = None

    @field_validator("monthly_usd", mode="before")
    @classmethod
    def _number(cls, v: Any) -> Any:
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v < 0):
            raise ValueError("must be a non-negative number")
        return float(v) if v is not None else v


#: The uses a model is chosen for (``[models]`` keys), and what each is called.
MODEL_USES = {"quick_eval": "the quick eval", "play_user": "Play's simulated user", "debugger": "the Debugger"}


class ModelChoices(BaseModel):
    """The registered model each use calls (``[models]``); None: the ``model`` / ``base_url`` settings."""

    model_config = ConfigDict(extra="forbid")

    quick_eval: str | None = None
    play_user: str | None = None
    debugger: str | None = None

    @field_validator("quick_eval", "play_user", "debugger", mode="before")
    @classmethod
    def _name(cls, v: Any) -> Any:
        if v is None or v == "":
            return None
        if not isinstance(v, str):
            raise ValueError("must be a registered model's name (`workbench models list`)")
        return v.strip() or None


class HubIndex(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str
    upload_url: str | None = None  # where uploads go when it is not the simple index's root

    @field_validator("url", "upload_url", mode="before")
    @classmethod
    def _http(cls, v: Any) -> Any:
        if v is None:
            return v
        if not isinstance(v, str) or not v.startswith(("http://", "https://")):
            raise ValueError("must be an http(s) URL")
        if "@" in v.split("//", 1)[1].split("/", 1)[0]:
            raise ValueError("must not hold credentials (use `workbench login index NAME`)")
        return v


class Hub(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default: str | None = None
    indexes: dict[str, HubIndex] = Field(default_factory=dict)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="WORKBENCH_", extra="ignore", validate_default=False)

    theme: str = "textual-dark"
    light_theme: str = "textual-light"
    base_url: str | None = None
    model: str | None = None
    quick_eval_n: int = 5
    export_dir: Path = Field(default_factory=Path.cwd)
    user_name: str = ""  # who plays a wb.Human rollout (stored with it); empty: the login name
    gpu_prices: Path | None = None
    keymap: dict[str, str] = Field(default_factory=dict)
    models: ModelChoices = Field(default_factory=ModelChoices)
    budget: Budget = Field(default_factory=Budget)
    hub: Hub = Field(default_factory=Hub)
    problems: list[str] = Field(default_factory=list, exclude=True)

    @field_validator("quick_eval_n", mode="before")
    @classmethod
    def _count(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().isdigit():  # from the environment
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError("must be a whole number of at least 1")
        return v

    @field_validator("base_url", "model", mode="before")
    @classmethod
    def _blank_is_none(cls, v: Any) -> Any:
        return None if v == "" else v

    @field_validator("export_dir", "gpu_prices", mode="after")
    @classmethod
    def _expand(cls, v: Path | None) -> Path | None:
        return v.expanduser() if v is not None else v

    @field_validator("keymap", mode="before")
    @classmethod
    def _keys(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            raise ValueError('must be a table of binding id = "keys"')
        return {str(k): s.strip() for k, s in v.items() if isinstance(s, str) and s.strip()}

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings  # the file's values come in as init values (see load_settings)

    @property
    def monthly_budget_usd(self) -> float | None:
        return self.budget.monthly_usd

    def endpoint_for(self, use: str) -> tuple[str | None, str | None]:
        """(model, base_url) that ``use`` (a :data:`MODEL_USES` key) calls: the registered model chosen for it,
        else the ``model`` and ``base_url`` settings (None, None: the embedded model)."""
        chosen = getattr(self.models, use)
        return (chosen, None) if chosen else (self.model, self.base_url)

    def gpu_prices_file(self) -> Path:
        return self.gpu_prices or paths.config_dir() / "gpu_prices.json"


def settings_path() -> Path:
    return paths.config_dir() / SETTINGS_FILE


def _keymap_problems(raw: Any) -> list[str]:
    if not isinstance(raw, dict):
        return []
    return [f"{SETTINGS_FILE}: keymap {k!r} must be a key string like \"f1\" or \"ctrl+e\"; ignored"
            for k, v in raw.items() if not (isinstance(v, str) and v.strip())]


def _describe(err: Mapping[str, Any], data: dict[str, Any]) -> tuple[str, str]:
    """(the top-level key to drop, "key.sub must ..., got VALUE") of one validation error."""
    loc = [str(p) for p in err.get("loc", ())]
    value: Any = data
    for part in loc:
        value = value.get(part) if isinstance(value, dict) else None
    msg = str(err.get("msg", "is not valid")).removeprefix("Value error, ")
    msg = msg if msg.startswith("must") else f"is not valid ({msg})"
    return (loc[0] if loc else ""), f"{'.'.join(loc)} {msg}, got {value!r}"


def load_settings(path: Path | None = None, *, strict: bool = False) -> Settings:
    """The settings from the environment and the file at ``path`` (default :func:`settings_path`)."""
    p = path or settings_path()
    data: dict[str, Any] = {}
    problems: list[str] = []
    if p.is_file():
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            if strict:
                raise ConfigError(f"{p} is not valid TOML ({e}); fix it or move it away") from None
            problems.append(f"{p} is not valid TOML ({e}); using the default settings")
            data = {}
    data = {k: v for k, v in data.items() if k != "problems"}
    problems += _keymap_problems(data.get("keymap"))
    for _ in range(len(data) + 1):
        try:
            settings = Settings(**data)
            break
        except ValidationError as e:
            first, what = _describe(e.errors()[0], data)
            if strict:
                raise ConfigError(f"{p}: {what}; fix it in the settings file") from None
            problems.append(f"{SETTINGS_FILE}: {what}; using the default")
            data.pop(first, None)
    else:  # every key dropped and still invalid: the environment itself is wrong
        settings = Settings.model_construct()
    settings.problems = problems
    return settings


#: A hub index's name in ``[hub.indexes.NAME]``.
_INDEX_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")


def update_settings(changes: Mapping[tuple[str, ...], Any], path: Path | None = None) -> Settings:
    """Write ``changes`` (a key path, e.g. ``("budget", "monthly_usd")``, to its value; None removes the key)
    into the settings file, keeping its other keys and its comments, and return the settings it now holds. A
    value that does not validate is one :class:`ConfigError` naming the key ("budget.monthly_usd must be a
    non-negative number, got -5"), and then nothing is written."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    from workbench.fsutil import atomic_write

    p = path or settings_path()
    try:
        doc = tomlkit.parse(p.read_text(encoding="utf-8")) if p.is_file() else tomlkit.document()
    except (OSError, UnicodeDecodeError, TOMLKitError) as e:
        raise ConfigError(f"{p} cannot be read as TOML ({e}); fix it or move it away") from None
    for keys, value in changes.items():
        table: Any = doc
        for part in keys[:-1]:
            if part not in table:
                if value is None:
                    break
                table[part] = tomlkit.table()
            table = table[part]
        else:
            if value is None:
                table.pop(keys[-1], None)
            else:
                table[keys[-1]] = value
    data = {k: v for k, v in doc.unwrap().items() if k != "problems"}
    try:
        settings = Settings(**data)
    except ValidationError as e:
        raise ConfigError(_describe(e.errors()[0], data)[1]) from None
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(p, tomlkit.dumps(doc))
    return settings


def add_hub_index(name: str, url: str, path: Path | None = None) -> Settings:
    """Add (or replace) the package index ``name`` at ``url``, the default when it is the first one."""
    if not _INDEX_NAME.match(name):
        raise ConfigError(f"hub index name {name!r} must be letters, digits, _ and - (at most 40), e.g. company")
    current = load_settings(path, strict=True).hub
    changes: dict[tuple[str, ...], Any] = {("hub", "indexes", name): {"url": url.strip()}}
    if not current.default:
        changes[("hub", "default")] = name
    return update_settings(changes, path)


def remove_hub_index(name: str, path: Path | None = None) -> Settings:
    """Forget the package index ``name`` (and it as the default: the next one, if any, is)."""
    hub = load_settings(path, strict=True).hub
    if name not in hub.indexes:
        raise ConfigError(f"no hub index named {name!r} is configured")
    rest = [n for n in hub.indexes if n != name]
    changes: dict[tuple[str, ...], Any] = {("hub", "indexes", name): None}
    if hub.default == name:
        changes[("hub", "default")] = rest[0] if rest else None
    return update_settings(changes, path)


__all__ = ["MODEL_USES", "SETTINGS_FILE", "Budget", "Hub", "HubIndex", "ModelChoices", "Settings", "add_hub_index",
           "load_settings", "remove_hub_index", "settings_path", "update_settings"]
