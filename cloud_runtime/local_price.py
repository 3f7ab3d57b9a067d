"""The local backend's device and its price per device-second, which its launch charges and its forecast
multiplies."""

from __future__ import annotations

LOCAL_PROVIDER, LOCAL_DEVICE = "local", "cpu"


def local_price() -> float:
    """USD per device-second of the local backend: ``workbench gpu-prices set local cpu ...``, else 0."""
    from workbench.cost.gpu_prices import load_prices

    p = load_prices().get((LOCAL_PROVIDER, LOCAL_DEVICE))
    return p.usd_per_gpu_s if p else 0.0
