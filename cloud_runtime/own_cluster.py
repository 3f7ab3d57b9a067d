"""The price of a cluster you own (``cloud.provider = "own"``): a row ``own:GPU`` of the GPU price table
(``workbench gpu-prices set own H100 --per-hour USD``, per GPU-hour: a node costs ``gpus_per_node`` times
it), or zero when there is none — the machines are paid for already. The plan says which GPU model it
assumed and what a node-hour costs.
"""

from __future__ import annotations

from workbench.cost.gpu_prices import GpuPrice, canonical_gpu, load_prices, price_for

OWN_PROVIDER = "own"


def own_price(gpu: str, table: dict[tuple[str, str], GpuPrice] | None = None) -> GpuPrice:
    """The ``own:GPU`` row of the price table, else a zero price saying so."""
    table = load_prices() if table is None else table
    row = table.get((OWN_PROVIDER, canonical_gpu(gpu)))
    if row is not None:
        return row
    return GpuPrice(OWN_PROVIDER, canonical_gpu(gpu), 0.0,
                    f"a cluster you own, no price set: `workbench gpu-prices set {OWN_PROVIDER} {canonical_gpu(gpu)} "
                    "--per-hour USD` (per GPU-hour) prices it")


def plan_price(provider: str, gpu: str, table: dict[tuple[str, str], GpuPrice] | None = None) -> GpuPrice:
    """The price a plan uses: :func:`own_price` for ``own``, the table's row (or its refusal) otherwise."""
    if provider.strip().lower() == OWN_PROVIDER:
        return own_price(gpu, table)
    return price_for(provider, gpu, table)


def own_assumption(gpu: str, gpus_per_node: int, price: GpuPrice) -> str:
    """The plan's sentence about a cluster you own: the GPU model it assumed and the price of a node-hour."""
    node_h = price.usd_per_gpu_s * 3600 * gpus_per_node
    return (f"a cluster you own (provider {OWN_PROVIDER}): GPU model assumed {gpu} (cloud.gpu), "
            f"{gpus_per_node} per node (cloud.gpus_per_node); ${node_h:g}/node-hour = {gpus_per_node} × "
            f"${price.usd_per_gpu_hour:g}/GPU-hour ({price.source or 'gpu-prices ' + OWN_PROVIDER + ':' + gpu})")


__all__ = ["OWN_PROVIDER", "own_assumption", "own_price", "plan_price"]
