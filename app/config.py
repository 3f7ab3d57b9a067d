"""The TUI's settings: ``<XDG config>/workbench/tui.toml`` (optional).

Example::

    theme = "textual-dark"          # the dark theme; `ctrl+t` toggles to light_theme
    light_theme = "textual-light"
    base_url = "http://127.0.0.1:8000/v1"   # quick-eval endpoint (else WORKBENCH_BASE_URL, else embedded)
    model = "my-model"
    quick_eval_n = 5
    export_dir = "~/workbench-exports"

    [keymap]                        # binding id = keys (comma separated)
    "screen.environments" = "f1"
    "env.eval" = "E"

    [budget]                        # the Costs screen's monthly bar: spend this calendar month against it
    monthly_usd = 50.0
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench import paths


@dataclass(slots=True)
class TuiConfig:
    theme: str = "textual-dark"
    light_theme: str = "textual-light"
    base_url: str | None = None
    model: str | None = None
    quick_eval_n: int = 5
    export_dir: Path = field(default_factory=Path.cwd)
    keymap: dict[str, str] = field(default_factory=dict)
    monthly_budget_usd: float | None = None  # [budget] monthly_usd
    problems: list[str] = field(default_factory=list)  # shown as notifications at start


def config_path() -> Path:
    return paths.config_dir() / "tui.toml"


def _get(data: dict[str, Any], key: str, kind: type, problems: list[str]) -> Any:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or isinstance(value, bool) != (kind is bool):
        problems.append(f"tui.toml: {key} must be a {kind.__name__}, got {value!r}; using the default")
        return None
    return value


def load_config(path: Path | None = None) -> TuiConfig:
    """Read the config file; a missing file gives the defaults, a bad one gives defaults and a problem."""
    cfg = TuiConfig()
    cfg.base_url = os.environ.get("WORKBENCH_BASE_URL") or None
    cfg.model = os.environ.get("WORKBENCH_MODEL") or None
    p = path or config_path()
    if not p.is_file():
        return cfg
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        cfg.problems.append(f"{p} is not valid TOML ({e}); using the default settings")
        return cfg
    probs = cfg.problems
    for key in ("theme", "light_theme", "base_url", "model"):
        value = _get(data, key, str, probs)
        if value:
            setattr(cfg, key, value)
    n = _get(data, "quick_eval_n", int, probs)
    if n is not None:
        if n >= 1:
            cfg.quick_eval_n = n
        else:
            probs.append("tui.toml: quick_eval_n must be at least 1; using the default")
    export_dir = _get(data, "export_dir", str, probs)
    if export_dir:
        cfg.export_dir = Path(export_dir).expanduser()
    keymap = data.get("keymap", {})
    if not isinstance(keymap, dict):
        probs.append("tui.toml: [keymap] must be a table of binding id = \"keys\"; ignored")
    else:
        for k, v in keymap.items():
            if isinstance(v, str) and v.strip():
                cfg.keymap[str(k)] = v.strip()
            else:
                probs.append(f"tui.toml: keymap {k!r} must be a key string like \"f1\" or \"ctrl+e\"; ignored")
    budget = data.get("budget", {})
    if not isinstance(budget, dict):
        probs.append("tui.toml: [budget] must be a table like `monthly_usd = 50.0`; ignored")
    else:
        monthly = budget.get("monthly_usd")
        if monthly is not None:
            if isinstance(monthly, bool) or not isinstance(monthly, int | float) or monthly < 0:
                probs.append(f"tui.toml: budget.monthly_usd must be a non-negative number, got {monthly!r}; ignored")
            else:
                cfg.monthly_budget_usd = float(monthly)
    return cfg
