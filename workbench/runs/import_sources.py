"""Where ``workbench import`` reads from: the file's kind checked before anything opens it, and the reader
of its format (``import_formats``, ``import_verifiers``, ``import_inspect``, ``import_atif``)."""

from __future__ import annotations

import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from workbench.errors import ConfigError
from workbench.runs.import_atif import read_atif
from workbench.runs.import_formats import Conversation, Problem, Source, read_openai_jsonl
from workbench.runs.import_inspect import read_inspect
from workbench.runs.import_verifiers import read_verifiers

Reader = Callable[[Path], tuple[Source, Iterator[Conversation | Problem]]]
READERS: dict[str, Reader] = {"openai-jsonl": read_openai_jsonl, "verifiers": read_verifiers, "inspect": read_inspect,
                           "atif": read_atif}
FORMATS = tuple(READERS)
_KINDS = ((stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISFIFO, "named pipe (FIFO)"),
          (stat.S_ISSOCK, "socket"))


def check_kind(path: Path) -> None:
    """A path to import from is a regular file or a folder: a device, a named pipe or a socket (which
    could be read forever, or block) is refused by its kind before anything opens it."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist; give the path of the file to import") from None
    except OSError as e:
        raise ConfigError(f"cannot read {path} ({e.strerror or e}); nothing was imported") from None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    kind = next((name for test, name in _KINDS if test(mode)), "special file")
    raise ConfigError(f"{path} is a {kind}, not a regular file; give a file (or a results folder) to import")


def open_source(path: Path, fmt: str) -> tuple[Source, Iterator[Conversation | Problem]]:
    if fmt not in FORMATS:
        raise ConfigError(f"unknown import format {fmt!r}; use one of {', '.join(FORMATS)}")
    check_kind(path)
    return READERS[fmt](path)
