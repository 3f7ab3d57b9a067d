"""Where a served model's files are, for code that only needs its tokenizer or config (the trace
renderer, reports): the embedded server's own resolution, without loading weights or building."""

from __future__ import annotations

from pathlib import Path

from workbench_local.models.loading import TINY_ALIASES, ModelLoadError, resolve


def resolve_model_path(model: str, *, build: bool = False) -> Path:
    """The local directory of ``model`` (``workbench-tiny``/``tiny``, a directory, or a cached Hugging
    Face id). The tiny model is built only when ``build`` is true; otherwise a missing build raises
    :class:`ModelLoadError`, as does anything not available offline."""
    if model in TINY_ALIASES and not build:
        from workbench_local.models.tiny_model import BUILD_FILE, default_dir, is_current_build

        path = default_dir()
        if not (path / BUILD_FILE).exists():
            raise ModelLoadError(f"the embedded model is not built yet ({path}); run `workbench serve` once")
        if not is_current_build(path):  # its tokenizer may not be the one the server will serve
            raise ModelLoadError(f"the embedded model at {path} is a build of an older recipe; run `workbench "
                                 "serve` once to rebuild it")
        return path
    return Path(resolve(model, allow_download=False)[0])
