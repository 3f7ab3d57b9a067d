"""Swap an environment's harness or runtime from the command line, without editing it."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

from workbench.authoring.harness import Harness
from workbench.errors import ConfigError


def load_attr(spec: str, option: str = "--harness") -> Any:
    """``module:Name`` or ``path/to/file.py:Name``; errors name ``option``, the flag that gave ``spec``."""
    if ":" not in spec:
        raise ConfigError(f"{option} {spec!r} must look like module:Name or path/to/file.py:Name")
    where, _, attr = spec.rpartition(":")
    try:
        if where.endswith(".py"):
            p = Path(where)
            if not p.is_file():
                raise ConfigError(f"{option} file {where} does not exist")
            s = importlib.util.spec_from_file_location(f"_workbench_{option.strip('-')}_{p.stem}", p)
            assert s and s.loader
            mod = importlib.util.module_from_spec(s)
            s.loader.exec_module(mod)
        else:
            mod = importlib.import_module(where)
    except ConfigError:
        raise
    except (Exception, SystemExit) as e:
        raise ConfigError(f"{option} {spec!r}: cannot import {where} ({type(e).__name__}: {e})") from None
    try:
        return getattr(mod, attr)
    except AttributeError:
        raise ConfigError(f"{option} {spec!r}: {where} has no attribute {attr!r}") from None


def load_harness(spec: str) -> Harness:
    if spec in ("single", "single-turn", "SingleTurn"):
        from workbench.authoring.harness import SingleTurn

        return SingleTurn()
    obj = load_attr(spec)
    if isinstance(obj, type) or (callable(obj) and not isinstance(obj, Harness)):
        try:
            obj = obj()
        except Exception as e:
            raise ConfigError(f"--harness {spec!r}: constructing it failed ({type(e).__name__}: {e})") from None
    if not isinstance(obj, Harness):
        raise ConfigError(f"--harness {spec!r} is a {type(obj).__name__}, not a wb harness")
    return obj


def load_runtime(spec: str, current: Any = None) -> Any:
    """``--runtime local|docker[:IMAGE]|modal``; the environment's own limits (timeout, memory, ...) carry over."""
    from workbench.authoring.runtimes import swap_runtime

    return swap_runtime(spec.strip(), current)
