"""Lazy task sets: the tasks an environment poses to a model."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, overload

import orjson

from workbench.errors import EnvLoadError
from workbench.records.task import Task


class TaskSet:
    """A lazy, re-iterable sequence of tasks.

    Slicing, ``shuffle``, ``filter`` and ``map`` return new task sets without reading the source;
    the source is read when the set is iterated (and ``len`` materialises it once).
    """

    def __init__(self, source: Callable[[], Iterable[Task]], name: str = "tasks",
                 data_files: Iterable[str | Path] = ()) -> None:
        """``data_files``: the local files the tasks are read from; they are part of the environment's
        version (appending a row to one changes it), wherever they lie."""
        self._source = source
        self.name = name
        self._cache: list[Task] | None = None
        self.data_files: tuple[Path, ...] = tuple(Path(f).resolve() for f in data_files)

    def _derive(self, source: Callable[[], Iterable[Task]]) -> TaskSet:
        """A lazy view of this set: the same name and data files."""
        return TaskSet(source, name=self.name, data_files=self.data_files)

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]], name: str = "tasks") -> TaskSet:
        rows = records if isinstance(records, list | tuple) else list(records)
        return cls(lambda: (r if isinstance(r, Task) else Task.from_record(r) for r in rows), name=name)

    @classmethod
    def from_jsonl(cls, path: str | Path, name: str | None = None) -> TaskSet:
        p = Path(path)
        if not p.is_file():
            raise EnvLoadError(f"task file {p} does not exist")

        def read() -> Iterator[Task]:
            with p.open("rb") as fh:
                for lineno, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        row = orjson.loads(line)
                    except orjson.JSONDecodeError as e:
                        raise EnvLoadError(f"{p}:{lineno}: not valid JSON ({e})") from None
                    yield Task.from_record(row)

        return cls(read, name=name or p.stem, data_files=[p])

    @classmethod
    def from_hf(cls, dataset: Any, split: str = "train", name: str | None = None, **load_kwargs: Any) -> TaskSet:
        """From a Hugging Face ``datasets.Dataset`` or a dataset id (loaded with ``datasets.load_dataset``).
        A local path (a folder or ``data_files=...``) is part of the environment's version."""
        dataset_arg = dataset
        if isinstance(dataset, str):
            try:
                import datasets  # heavy: imported only here
            except ImportError:
                raise EnvLoadError("TaskSet.from_hf needs the 'datasets' package: pip install 'rl-workbench[hf]'") from None
            ds_name = dataset
            try:
                dataset = datasets.load_dataset(dataset, split=split, **load_kwargs)
            except Exception as e:  # offline, missing, ...
                raise EnvLoadError(f"could not load Hugging Face dataset {ds_name!r}: {e}") from None
            name = name or ds_name.split("/")[-1]
        ds = dataset
        local = [Path(dataset_arg)] if isinstance(dataset_arg, str) and Path(dataset_arg).exists() else []
        local += [Path(f) for f in _data_files_arg(load_kwargs.get("data_files"))]
        return cls(lambda: (Task.from_record(row) for row in ds), name=name or "hf", data_files=_expand(local))

    # -- lazy operations ----------------------------------------------------------------------
    def __iter__(self) -> Iterator[Task]:
        if self._cache is not None:
            return iter(self._cache)
        return iter(self._source())

    def materialize(self) -> list[Task]:
        if self._cache is None:
            self._cache = list(self._source())
        return self._cache

    def __len__(self) -> int:
        return len(self.materialize())

    @overload
    def __getitem__(self, key: int) -> Task: ...
    @overload
    def __getitem__(self, key: slice) -> TaskSet: ...
    def __getitem__(self, key: int | slice) -> Task | TaskSet:
        if isinstance(key, int):
            if key < 0:
                return self.materialize()[key]
            try:
                return next(itertools.islice(iter(self), key, None))
            except StopIteration:
                raise IndexError(f"task index {key} out of range") from None
        if isinstance(key, slice):
            start, stop, step = key.start, key.stop, key.step
            if any(v is not None and v < 0 for v in (start, stop, step)):
                parent = self
                return self._derive(lambda: parent.materialize()[key])
            parent = self
            return self._derive(lambda: itertools.islice(iter(parent), start, stop, step))
        raise TypeError("TaskSet indices must be integers or slices")

    def take(self, n: int | None) -> TaskSet:
        return self if n is None else self[:n]

    def shuffle(self, seed: int = 0) -> TaskSet:
        parent = self

        def shuffled() -> list[Task]:
            items = list(parent)
            random.Random(seed).shuffle(items)
            return items

        return self._derive(shuffled)

    def filter(self, predicate: Callable[[Task], bool]) -> TaskSet:
        parent = self
        return self._derive(lambda: (t for t in parent if predicate(t)))

    def map(self, fn: Callable[[Task], Task]) -> TaskSet:
        parent = self
        return self._derive(lambda: (fn(t) for t in parent))

    def __repr__(self) -> str:
        return f"TaskSet(name={self.name!r})"


def _data_files_arg(value: Any) -> list[str]:
    """The paths in ``load_dataset``'s ``data_files`` (a path, a list, or a dict of split -> path(s))."""
    if value is None:
        return []
    if isinstance(value, str | Path):
        return [str(value)]
    if isinstance(value, Mapping):
        return [f for v in value.values() for f in _data_files_arg(v)]
    return [str(v) for v in value]


def _expand(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.is_file() and not any(part.startswith(".") for part in
                                                                              f.relative_to(p).parts))
        elif p.is_file():
            out.append(p)
    return out
