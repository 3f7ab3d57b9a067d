"""Reading a published environment's wheel without trusting it: sizes bounded, requirements checked.

A wheel from an index is data from outside. Its members are read with their declared sizes checked first
(the sum, and each one) and their actual sizes bounded while they expand, so a small wheel of gigabytes
of zeros is refused before it takes the memory. Its ``Requires-Dist`` lines become what ``uv pip install``
reads: each must be a plain PEP 508 requirement (``name[extras] specifier ; marker``), parsed with
``packaging`` and written back in its normal form; a URL, a path or an installer option (``-e``,
``--index-url``...) refuses the pull by name.
"""

from __future__ import annotations

import email.parser
import zipfile
from io import BytesIO

from workbench.bundles.bundle import names
from workbench.errors import WorkbenchError

#: The most a wheel's members may expand to in all, and the most its eval card may take.
MAX_UNPACKED = 256 << 20
MAX_CARD_BYTES = 8 << 20
MAX_MEMBERS = 20_000
_CHUNK = 1 << 20


class UnpackError(WorkbenchError):
    """A published wheel is refused before anything is installed (size, requirements)."""


def read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    """``info``'s bytes, refused when it declares or expands to more than ``limit`` bytes."""
    if info.file_size > limit:
        raise UnpackError(f"its member {info.filename} declares {info.file_size:,} bytes, over the limit of "
                          f"{limit:,}")
    out = bytearray()
    with zf.open(info) as f:
        while chunk := f.read(min(_CHUNK, limit + 1 - len(out))):
            out += chunk
            if len(out) > limit:
                raise UnpackError(f"its member {info.filename} expands past {limit:,} bytes")
    return bytes(out)


def requirement(text: str, where: str) -> str:
    """``text`` as a plain requirement in its normal form; UnpackError naming ``where`` otherwise."""
    from packaging.requirements import InvalidRequirement, Requirement

    stripped = text.strip()
    try:
        req = Requirement(stripped)
    except InvalidRequirement:
        req = None
    if req is None or req.url or stripped.startswith("-") or "\n" in text:
        raise UnpackError(f"{where} requires {text!r}, which is not a plain requirement (name[extras] version; "
                          "no URL, path or installer option); refusing it, nothing was installed")
    return str(req)


def unpack(name: str, wheel: bytes, what: str) -> tuple[str, list[tuple[str, bytes]], list[str], str]:
    """(kind, the environment's files, the lock, the hash the summary names) of the published wheel
    ``what`` of environment ``name``; UnpackError or KeyError/StopIteration/BadZipFile when it is not one."""
    _, mod, _ = names(name, "0" * 12)
    with zipfile.ZipFile(BytesIO(wheel)) as zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise UnpackError(f"{what} holds {len(infos):,} members, over the limit of {MAX_MEMBERS:,}; refusing it")
        declared = sum(i.file_size for i in infos)
        if declared > MAX_UNPACKED:
            raise UnpackError(f"{what} expands to {declared:,} bytes, over the limit of {MAX_UNPACKED:,}; refusing it, "
                              "nothing was installed")
        budget = [MAX_UNPACKED]

        def read(info: zipfile.ZipInfo) -> bytes:
            try:
                data = read_member(zf, info, budget[0])
            except UnpackError as e:
                raise UnpackError(f"{what}: {e}; refusing it, nothing was installed") from None
            budget[0] -= len(data)
            return data

        by_name = {i.filename: i for i in infos}
        meta_info = next(i for i in infos if i.filename.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(read(meta_info).decode("utf-8", "replace"))
        if f"{mod}.py" in by_name:
            kind, files = "module", [(f"{name}.py", read(by_name[f"{mod}.py"]))]
        else:
            kind = "package"
            files = sorted(((i.filename[len(mod) + 1:], read(i)) for i in infos
                            if i.filename.startswith(f"{mod}/") and not i.filename.endswith("/")),
                           key=lambda x: tuple(x[0].split("/")))
    lock = sorted(str(r) for r in (meta.get_all("Requires-Dist") or []))
    for r in lock:  # hashed as written; installed in their normal form (:func:`requirement`)
        requirement(r, what)
    summary = meta.get("Summary") or ""
    stated = summary.rsplit("sha256 ", 1)[-1].rstrip(")") if "sha256 " in summary else ""
    return kind, files, lock, stated


__all__ = ["MAX_CARD_BYTES", "MAX_UNPACKED", "UnpackError", "read_member", "requirement", "unpack"]
