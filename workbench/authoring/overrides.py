"""Environment overrides: a system prompt chosen by ``workbench optimize --apply``, kept beside the
environment instead of written into its source.

An override lives in ``<config>/overrides/<env>.json`` (this machine's choice) or, inside a bundle, as
``workbench_override.json`` in the environment's own folder (``workbench package`` copies this machine's
override there, so the cloud side loads the same prompt). :func:`apply` sets it on a loaded environment
and folds it into the environment's version, so runs with and without it never compare as the same
version. ``workbench envs`` shows it; ``workbench optimize ENV --unapply`` removes it.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from workbench.config import paths
from workbench.errors import ConfigError
from workbench.fsutil import atomic_write

BUNDLED_FILE = "workbench_override.json"


@dataclass(slots=True)
class Override:
    system_prompt: str
    origin: str = ""  # what chose it: "optimize RUN"
    base_version: str = ""  # the environment's version it was chosen on
    created_at: float = 0.0

    def digest(self) -> str:
        return hashlib.sha256(self.system_prompt.encode()).hexdigest()[:8]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"


def overrides_dir() -> Path:
    return paths.config_dir() / "overrides"


def override_path(env_name: str) -> Path:
    if not env_name or "/" in env_name or env_name.startswith("."):
        raise ConfigError(f"{env_name!r} is not an environment name an override can be kept under")
    return overrides_dir() / f"{env_name}.json"


class _OverrideFile(BaseModel):
    """What an override file must hold: a strict shape, so a hand-edited file fails with its field named."""

    model_config = ConfigDict(extra="ignore", strict=True)
    system_prompt: str
    origin: str = ""
    base_version: str = ""
    created_at: float = 0.0


def _field_problem(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "the file"
    if first["type"] == "missing":
        return f"it has no {where}"
    return f"{where}: {first['msg'].lower()} (got {first.get('input')!r:.60})"


def _read(path: Path) -> Override | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the environment override {path} ({e}); fix or delete that file") from None
    if not isinstance(data, dict):
        raise ConfigError(f"the environment override {path} is not a JSON object with a system_prompt string; "
                          "fix or delete that file")
    try:
        checked = _OverrideFile.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"the environment override {path} is malformed ({_field_problem(e)}); fix that field "
                          f"or delete the file") from None
    return Override(checked.system_prompt, checked.origin, checked.base_version, float(checked.created_at))


def load(env_name: str) -> Override | None:
    """This machine's override of ``env_name``, or None."""
    return _read(override_path(env_name))


def find(env_name: str, folder: Path | None) -> Override | None:
    """The override that applies: this machine's, else one shipped in the environment's folder."""
    found = load(env_name)
    if found is None and folder is not None:
        found = _read(folder / BUNDLED_FILE)
    return found


def save(env_name: str, override: Override) -> Path:
    path = override_path(env_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    override.created_at = override.created_at or time.time()
    atomic_write(path, override.to_json())
    return path


def remove(env_name: str) -> bool:
    try:
        override_path(env_name).unlink()
    except FileNotFoundError:
        return False
    return True


def apply(env: Any, override: Override | None) -> None:
    """Set ``override`` on the loaded ``env`` (its harness's system prompt) and mark its version."""
    if override is None:
        return
    if not hasattr(env.harness, "system_prompt"):
        raise ConfigError(f"the override of {env.name!r} sets a system prompt, but its harness "
                          f"({env.harness.describe()}) has none; remove it with `workbench optimize {env.name} --unapply`")
    env.harness.system_prompt = override.system_prompt
    env.override = override
    env.version = hashlib.sha256(f"{env.version}+{override.digest()}".encode()).hexdigest()[:12]


__all__ = ["BUNDLED_FILE", "Override", "apply", "find", "load", "override_path", "remove", "save"]
