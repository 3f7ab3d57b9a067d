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
    ref = discovery.resolve(spec)
    env = discovery.load_ref(ref, env_args or {})
    why = refusal(env)
    if why:
        raise ExportRefused(why)
    return write_package(env, target, dict(env_args or {}), package_name(env.name, name), requirements(ref))


def requirements(ref: Any) -> list[str]:
    """What the package depends on: verifiers, then what the environment declares (its pyproject.toml's
    dependencies, requirements.txt, or a single file's script block), never Workbench itself."""
    from packaging.requirements import InvalidRequirement, Requirement

    from workbench.authoring.env_files import read_env_files
    from workbench.bundles.bundle import declared_requirements

    declared = declared_requirements(ref, read_env_files(ref.path)) if ref.path is not None else []
    for text in declared:
        try:
            req_name = Requirement(text).name.lower().replace("_", "-")
        except InvalidRequirement:
            raise ExportRefused(f"{ref.name} declares {text!r}, which is not a requirement pip reads") from None
        if req_name in ("rl-workbench", "workbench"):
            raise ExportRefused(f"{ref.name} declares {text!r}: an exported package cannot depend on Workbench")
    return [VERIFIERS_REQUIREMENT, *declared]


__all__ = ["VERIFIERS_REQUIREMENT", "ExportRefused", "Exported", "export_verifiers", "refusal"]
