"""``workbench export-env ENV --format verifiers``: a Workbench environment as a verifiers 0.4 package.

:func:`export_verifiers` loads the environment, refuses one whose parts verifiers cannot carry (one
line naming them; nothing written), and writes the package (see :mod:`.package`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.formats.verifiers_export.package import (
    VERIFIERS_REQUIREMENT,
    Exported,
    check_target,
    package_name,
    write_package,
)
from workbench.formats.verifiers_export.refusals import ExportRefused, refusal


def export_verifiers(spec: str, out: str | Path, env_args: dict[str, Any] | None = None,
                     name: str | None = None) -> Exported:
    """Export the environment ``spec`` (as ``workbench eval`` names one) into the new or empty folder ``out``."""
    from workbench.authoring import discovery

    target = Path(out).expanduser().resolve()
    check_target(target)
    env = discovery.load(spec, env_args or {})
    return write_package(env, target, dict(env_args or {}), package_name(env.name, name))


__all__ = ["VERIFIERS_REQUIREMENT", "ExportRefused", "Exported", "export_verifiers", "refusal"]
