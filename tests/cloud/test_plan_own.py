"""``cloud.provider = "own"``: a cluster you own is priced from the GPU price table's ``own:GPU`` row, or
at zero without one, and the plan says which GPU model it assumed and what a node-hour costs; with
``--backend ray --address`` the plan takes the cluster's shape from the live cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from workbench_cloud.own_cluster import own_price
from workbench_cloud.plan import load_launch_config, make_plan

from workbench.cost.gpu_prices import load_prices, set_price
from workbench.errors import ConfigError

from .test_plan import SMALL


@pytest.fixture(autouse=True)
def _own_prices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_GPU_PRICES", str(tmp_path / "gpu_prices.json"))


def test_a_cluster_you_own_without_a_price_costs_nothing_and_says_its_gpu() -> None:
    plan = make_plan(load_launch_config(None, {**SMALL, "cloud.provider": "own"}, "arithmetic"))
    assert plan.provider == "own" and plan.usd_per_gpu_s == 0 and plan.total_usd == 0
    said = [a for a in plan.assumptions if a.startswith("a cluster you own")]
    assert len(said) == 1 and "GPU model assumed H100 (cloud.gpu)" in said[0] and "$0/node-hour" in said[0]
    assert "workbench gpu-prices set own H100 --per-hour USD" in said[0]


def test_a_cluster_you_own_is_priced_per_node_from_the_price_table(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    set_price("own", "h100", 2.0 / 3600, source="our rack", path=path)
    table = load_prices(path)
    assert own_price("H100", table).usd_per_gpu_hour == pytest.approx(2.0)
    plan = make_plan(load_launch_config(None, {**SMALL, "cloud.provider": "own"}, "arithmetic"), prices=table)
    assert plan.usd_per_gpu_s == pytest.approx(2.0 / 3600) and plan.total_usd > 0
    said = next(a for a in plan.assumptions if a.startswith("a cluster you own"))
    assert "$16/node-hour = 8 × $2/GPU-hour (our rack)" in said


def test_the_plan_takes_the_live_clusters_shape() -> None:
    pytest.importorskip("ray")
    from workbench_cloud.ray.cluster import plan_shape

    gpu = {"CPU": 96.0, "GPU": 8.0, "accelerator_type:H100": 1.0}
    nodes = [{"NodeID": "a", "Resources": gpu}, {"NodeID": "b", "Resources": {**gpu, "GPU": 4.0}},
             {"NodeID": "head", "Resources": {"CPU": 8.0}}]
    assert plan_shape(nodes, "h:6379") == {"cloud.nodes": 2, "cloud.gpus_per_node": 4, "cloud.gpu": "H100"}
    with pytest.raises(ConfigError, match=r"the Ray cluster at h:6379 has no GPUs \(1 live node\(s\), CPU only\)"):
        plan_shape(nodes[2:], "h:6379")
