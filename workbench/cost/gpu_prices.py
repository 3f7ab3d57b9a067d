"""GPU hardware facts and GPU rental prices (USD per GPU-second), for cluster plans.

The hardware table holds what a plan needs from a data sheet: dense bf16 tensor peak, memory and
memory bandwidth. The price table holds list prices per (provider, GPU); the defaults are Modal's
published per-second list prices, and ``workbench gpu-prices set`` writes overrides (and rows for
other providers) to ``gpu_prices.json`` in the user's config directory, which wins over the
defaults. Prices change: every row says where it came from.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from workbench.errors import ConfigError, nearest
from workbench.fsutil import atomic_write


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str
    peak_tflops: float  # dense bf16 tensor-core peak (no sparsity), TFLOP/s
    memory_gb: float  # HBM, GB (10^9 bytes)
    hbm_tbps: float  # memory bandwidth, TB/s
    source: str = "NVIDIA data sheet (SXM where both exist), dense bf16"


#: GPU name as Modal spells it -> data-sheet figures.
GPU_SPECS: dict[str, GpuSpec] = {
    s.name: s
    for s in (
        GpuSpec("B200", 2250.0, 180.0, 8.0),
        GpuSpec("H200", 989.0, 141.0, 4.8),
        GpuSpec("H100", 989.0, 80.0, 3.35),
        GpuSpec("A100-80GB", 312.0, 80.0, 2.039),
        GpuSpec("A100-40GB", 312.0, 40.0, 1.555),
        GpuSpec("L40S", 362.0, 48.0, 0.864),
        GpuSpec("A10G", 70.0, 24.0, 0.6),
        GpuSpec("L4", 121.0, 24.0, 0.3),
        GpuSpec("T4", 65.0, 16.0, 0.32),  # fp16 (no bf16 on Turing)
    )
}

#: Other spellings Modal accepts.
GPU_ALIASES = {"A100": "A100-40GB", "A10": "A10G", "H100!": "H100", "B200+": "B200"}

MODAL_SOURCE = "Modal list price, 2025"

#: (provider, gpu) -> USD per GPU-second.
DEFAULT_PRICES: dict[tuple[str, str], float] = {
    ("modal", "B200"): 0.001736,
    ("modal", "H200"): 0.001261,
    ("modal", "H100"): 0.001097,
    ("modal", "A100-80GB"): 0.000694,
    ("modal", "A100-40GB"): 0.000583,
    ("modal", "L40S"): 0.000542,
    ("modal", "A10G"): 0.000306,
    ("modal", "L4"): 0.000222,
    ("modal", "T4"): 0.000164,
}

#: Scale-out network between nodes, Gbit/s per node (Modal clusters: 3,200 Gbps RDMA).
NETWORK_GBPS: dict[str, float] = {"modal": 3200.0}


@dataclass(frozen=True, slots=True)
class GpuPrice:
    provider: str
    gpu: str
    usd_per_gpu_s: float
    source: str = ""

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.usd_per_gpu_s * 3600

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "usd_per_gpu_hour": round(self.usd_per_gpu_hour, 4)}


def canonical_gpu(name: str) -> str:
    """``"a100-80gb"`` → ``"A100-80GB"``; an alias maps to its table name; unknown names stay as given."""
    up = name.strip().upper()
    up = GPU_ALIASES.get(up, up)
    for known in GPU_SPECS:
        if known.upper() == up:
            return known
    return name.strip()


def gpu_spec(name: str) -> GpuSpec:
    gpu = canonical_gpu(name)
    if gpu not in GPU_SPECS:
        raise ConfigError(f"unknown GPU {name!r}{nearest(gpu, list(GPU_SPECS))}; known: {', '.join(GPU_SPECS)} "
                          "(or give cloud.peak_tflops, cloud.gpu_memory_gb and cloud.hbm_tbps)")
    return GPU_SPECS[gpu]


def prices_path() -> Path:
    """Where overrides live: the ``gpu_prices`` setting (``$WORKBENCH_GPU_PRICES``) or
    ``<config dir>/gpu_prices.json``."""
    from workbench.config.settings import load_settings

    return load_settings(strict=True).gpu_prices_file()


def _read_overrides(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
        rows = data["prices"]
        assert isinstance(rows, list)
        return rows
    except (ValueError, KeyError, TypeError, AssertionError):
        raise ConfigError(f"{path} is not a GPU price file (a JSON object with a 'prices' list); fix or delete it") from None


def load_prices(path: Path | None = None) -> dict[tuple[str, str], GpuPrice]:
    """The price table: defaults, then the user's overrides."""
    table = {k: GpuPrice(k[0], k[1], v, MODAL_SOURCE) for k, v in DEFAULT_PRICES.items()}
    for row in _read_overrides(path or prices_path()):
        try:
            p = GpuPrice(str(row["provider"]), str(row["gpu"]), float(row["usd_per_gpu_s"]),  # type: ignore[arg-type]
                         str(row.get("source", "user")))
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"bad row in {path or prices_path()}: {row!r}") from None
        table[(p.provider, p.gpu)] = p
    return dict(sorted(table.items()))


def set_price(provider: str, gpu: str, usd_per_gpu_s: float, source: str = "user",
              path: Path | None = None) -> GpuPrice:
    if usd_per_gpu_s < 0:
        raise ConfigError("a GPU price cannot be negative")
    path = path or prices_path()
    price = GpuPrice(provider.strip().lower(), canonical_gpu(gpu), usd_per_gpu_s, source)
    rows = [r for r in _read_overrides(path) if (r.get("provider"), r.get("gpu")) != (price.provider, price.gpu)]
    rows.append({"provider": price.provider, "gpu": price.gpu, "usd_per_gpu_s": price.usd_per_gpu_s,
                 "source": price.source})
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps({"prices": rows}, indent=2) + "\n")
    return price


def delete_price(provider: str, gpu: str, path: Path | None = None) -> bool:
    """Drop a user override (a default row comes back); False when there was none."""
    path = path or prices_path()
    rows = _read_overrides(path)
    key = (provider.strip().lower(), canonical_gpu(gpu))
    kept = [r for r in rows if (r.get("provider"), r.get("gpu")) != key]
    if len(kept) == len(rows):
        return False
    atomic_write(path, json.dumps({"prices": kept}, indent=2) + "\n")
    return True


def price_for(provider: str, gpu: str, table: dict[tuple[str, str], GpuPrice] | None = None) -> GpuPrice:
    table = load_prices() if table is None else table
    key = (provider.strip().lower(), canonical_gpu(gpu))
    if key not in table:
        known = [f"{p}:{g}" for p, g in table]
        raise ConfigError(f"no GPU price for {key[0]}:{key[1]}{nearest(':'.join(key), known)}; add one with "
                          f"`workbench gpu-prices set {key[0]} {key[1]} --per-hour USD`")
    return table[key]
