"""Swap an environment's harness or runtime from the command line, without editing it."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.authoring.harness import Harness
from workbench.errors import OptionError, field_name

if TYPE_CHECKING:
    from workbench.authoring.runtimes import Runtime

HARNESS = "EvalOptions.harness"  # the field ``--harness`` fills


def load_attr(spec: str, field: str = "EvalOptions.harness") -> Any:
    """``module:Name`` or ``path/to/file.py:Name``; errors are :class:`OptionError` on ``field``, the
    option that gave ``spec``."""
    def refused(template: str, **values: Any) -> OptionError:
        return OptionError(field, spec, template="{field} {value!r}" + template, **values)

    if ":" not in spec:
        raise refused(" must look like module:Name or path/to/file.py:Name")
    where, _, attr = spec.rpartition(":")
    try:
        if where.endswith(".py"):
            p = Path(where)
            if not p.is_file():
                raise OptionError(field, spec, template="{field} file {where} does not exist", where=where)
            s = importlib.util.spec_from_file_location(f"_workbench_{field_name(field)}_{p.stem}", p)
            assert s and s.loader
            mod = importlib.util.module_from_spec(s)
            s.loader.exec_module(mod)
        else:
            mod = importlib.import_module(where)
    except OptionError:
        raise
    except (Exception, SystemExit) as e:
        raise refused(": cannot import {where} ({why})", where=where, why=f"{type(e).__name__}: {e}") from None
    try:
        return getattr(mod, attr)
    except AttributeError:
        raise refused(": {where} has no attribute {attr!r}", where=where, attr=attr) from None


def load_harness(spec: str) -> Harness:
    if spec in ("single", "single-turn", "SingleTurn"):
        from workbench.authoring.harness import SingleTurn

        return SingleTurn()
    obj = load_attr(spec)
    if isinstance(obj, type) or (callable(obj) and not isinstance(obj, Harness)):
        try:
            obj = obj()
        except Exception as e:
            raise OptionError(HARNESS, spec, template="{field} {value!r}: constructing it failed ({why})",
                              why=f"{type(e).__name__}: {e}") from None
    if not isinstance(obj, Harness):
        raise OptionError(HARNESS, spec, "a wb harness", "{field} {value!r} is a {kind}, not {allowed}",
                          kind=type(obj).__name__)
    return obj


def load_runtime(spec: str, current: Runtime | None = None) -> Runtime:
    """``--runtime local|docker[:IMAGE]|modal``; the environment's own limits (timeout, memory, ...) carry over."""
    from workbench.authoring.runtimes import swap_runtime

    return swap_runtime(spec.strip(), current)
