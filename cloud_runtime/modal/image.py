"""The one container image every role runs (inference, trainer, orchestrator), and its pins.

One image for all three roles: one build, one cache, and the trainer's torch is the torch vLLM was
built against. The steps are data (:func:`image_steps`): ``build_image`` applies them to
``modal.Image`` and ``describe_app`` prints them, so what the plan shows is what Modal builds.

The pins are stated here and nowhere else. vLLM 0.33.0 requires ``torch==2.14.0`` and
``transformers>=5.16.1,<5.21`` (its published metadata), so the trainer runs on exactly the torch
and transformers vLLM runs on; Workbench's own dependencies are pinned at the versions its tests
ran with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench_cloud.modal.spec import BUNDLE_PATH, DATA_HOME, HF_CACHE_PATH, ModalSpec

if TYPE_CHECKING:
    import modal

PYTHON_VERSION = "3.12"
UV_VERSION = "0.13.8"  # the uv binary Modal copies in to install the pins (unpinned, it takes :latest)

#: The GPU stack: inference (vLLM) and training (torch + peft) in one resolvable set.
GPU_PINS: dict[str, str] = {
    "vllm": "0.33.0",
    "torch": "2.14.0",
    "transformers": "5.20.2",
    "peft": "0.21.2",
    "safetensors": "0.8.0",
}

#: Workbench's own runtime dependencies (pyproject ``dependencies``), at the versions its tests ran with.
WORKBENCH_PINS: dict[str, str] = {
    "aiohttp": "3.14.5",
    "click": "8.5.1",
    "rich": "15.0.0",
    "sqlmodel": "0.0.50",
    "pydantic": "2.14.4",
    "orjson": "3.13.0",
    "keyring": "25.7.0",
}

#: The project's packages, copied into every container (``/root`` is on its PYTHONPATH).
PACKAGES: tuple[str, ...] = ("workbench", "workbench_local", "workbench_cloud")

#: Left out of the packages and the bundle: caches and dot-files, never package data (store SQL).
IGNORE: tuple[str, ...] = ("**/__pycache__", "**/*.pyc", "**/.*")

#: Environment of every container. ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` opens
#: ``/v1/load_lora_adapter``; ``HF_HOME`` puts downloaded weights on the shared cache volume;
#: ``XDG_DATA_HOME`` makes Workbench's run folders the run volume's (``modal_spec.RUNS_PATH``).
IMAGE_ENV: dict[str, str] = {
    "HF_HOME": HF_CACHE_PATH,
    "XDG_DATA_HOME": DATA_HOME,
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
    "PYTHONUNBUFFERED": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "WORKBENCH_BUNDLE": BUNDLE_PATH,
}


_IGNORE_REPR = re.compile(r"ignore=<[^>]*>")


def pinned(pins: dict[str, str]) -> list[str]:
    return [f"{name}=={version}" for name, version in pins.items()]


@dataclass(frozen=True, slots=True)
class ImageStep:
    """One ``modal.Image`` builder call: ``image.<op>(*args, **kwargs)``."""

    op: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        parts = [str(a) for a in self.args]
        parts += [f"{k}={v!r}" for k, v in self.kwargs.items() if k != "ignore"]
        return f"{self.op} {' '.join(parts)}".strip()


def image_steps(spec: ModalSpec) -> list[ImageStep]:
    """The image, in order. The first step is the base (a ``modal.Image`` constructor)."""
    bundle = Path(spec.bundle_dir).expanduser().resolve()
    return [
        ImageStep("debian_slim", kwargs={"python_version": PYTHON_VERSION}),
        ImageStep("uv_pip_install", tuple(pinned(GPU_PINS) + pinned(WORKBENCH_PINS)), {"uv_version": UV_VERSION}),
        ImageStep("env", (dict(IMAGE_ENV),)),
        # Mounted at container start (copy=False): editing Workbench's code needs no image rebuild.
        ImageStep("add_local_python_source", PACKAGES, {"ignore": list(IGNORE)}),
        # The bundle goes in as files; job.run_remote checks their hash before any GPU work.
        ImageStep("add_local_dir", (str(bundle), BUNDLE_PATH), {"ignore": list(IGNORE)}),
    ]


def build_image(spec: ModalSpec) -> modal.Image:
    """``image_steps(spec)`` applied to ``modal.Image``. Lazy: nothing is sent or built until the
    app runs."""
    import modal

    bundle = Path(spec.bundle_dir).expanduser()
    if not bundle.is_dir():
        from workbench.errors import ConfigError

        raise ConfigError(f"bundle folder {spec.bundle_dir} does not exist; run `workbench package ENV` first")
    base, *rest = image_steps(spec)
    image = getattr(modal.Image, base.op)(*base.args, **base.kwargs)
    for step in rest:
        image = getattr(image, step.op)(*step.args, **step.kwargs)
    return image


def dockerfile_commands(image: Any) -> list[str] | None:
    """The Dockerfile lines and mounts Modal will build ``image`` from, read from the lazily built
    layers without contacting Modal; None when this modal version keeps them elsewhere (it reads
    private attributes, so callers treat it as best effort)."""
    try:
        from modal._image import LATEST_IMAGE_BUILDER_VERSION as version
        from modal._utils.async_utils import synchronizer

        layers: list[list[str]] = []
        todo = [synchronizer._translate_in(image)]
        while todo:
            im = todo.pop()
            load = im._load
            cells = dict(zip(load.__code__.co_freevars, [c.cell_contents for c in load.__closure__ or ()],
                             strict=True))
            if "mount" in cells:  # add_local_*: files copied in at container start
                layers.append([_IGNORE_REPR.sub("ignore=...", f"MOUNT {cells['mount']!r}")])
            fn = cells.get("dockerfile_function")
            if fn is not None:
                layers.append(list(fn(version).commands))
            todo += ([cells["base_image"]] if "base_image" in cells else []) + list((cells.get("base_images") or {}).values())
        return [line for layer in reversed(layers) for line in layer]
    except Exception:
        return None


__all__ = ["GPU_PINS", "IMAGE_ENV", "PACKAGES", "PYTHON_VERSION", "WORKBENCH_PINS", "ImageStep", "build_image",
           "dockerfile_commands", "image_steps", "pinned"]
