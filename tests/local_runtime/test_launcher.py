"""The trainer's launcher (``workbench_local.training.launcher``): the torchrun command every trainer of
several processes starts with, what this machine can hold, and the agents of a group seen as one process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from workbench_local.training.launcher import (
    LOOPBACK_ENV,
    RANK_ENTRY,
    NodeGroup,
    placement_problem,
    threads_per_rank,
    torchrun_argv,
)


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_torchrun_argv_is_one_agent_of_a_c10d_group() -> None:
    worker = ["workbench_local.training.worker", "--run", "r1", "--dir", "/tmp/x"]
    cmd = torchrun_argv(worker, nodes=2, ranks_per_node=3, node_rank=1, endpoint="127.0.0.1:29400", rdzv_id="r1",
                        local_addr="127.0.0.1")
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert _flag(cmd, "--nnodes") == "2" and _flag(cmd, "--nproc-per-node") == "3"
    assert _flag(cmd, "--rdzv-backend") == "c10d" and _flag(cmd, "--rdzv-endpoint") == "127.0.0.1:29400"
    assert _flag(cmd, "--rdzv-id") == "r1" and _flag(cmd, "--local-addr") == "127.0.0.1"
    assert _flag(cmd, "--rdzv-conf") == "is_host=0" and _flag(cmd, "--max-restarts") == "0"
    # The worker's command line travels as one JSON argument: torchrun's parser never sees `--run`.
    assert cmd[-3:-1] == ["--module", RANK_ENTRY] and json.loads(cmd[-1]) == worker
    assert _flag(torchrun_argv(["m"], nodes=2, ranks_per_node=1, node_rank=0, endpoint="h:1", rdzv_id="r"),
                 "--rdzv-conf") == "is_host=1"
    assert LOOPBACK_ENV["GLOO_SOCKET_IFNAME"] == "lo" and LOOPBACK_ENV["MASTER_ADDR"] == "127.0.0.1"


@pytest.mark.parametrize(("nodes", "ranks", "node_rank", "module"), [
    (0, 1, 0, ["m"]), (1, 0, 0, ["m"]), (2, 1, 2, ["m"]), (1, 1, -1, ["m"]), (1, 1, 0, []),
])
def test_torchrun_argv_refuses_a_group_that_cannot_be(nodes: int, ranks: int, node_rank: int,
                                                        module: list[str]) -> None:
    with pytest.raises(ValueError):
        torchrun_argv(module, nodes=nodes, ranks_per_node=ranks, node_rank=node_rank, endpoint="h:1", rdzv_id="r")


@pytest.mark.parametrize(("threads", "ranks", "each"), [(8, 2, 4), (8, 3, 2), (1, 4, 1), (4, 1, 4), (3, 0, 3)])
def test_threads_are_shared_among_the_ranks_here(threads: int, ranks: int, each: int) -> None:
    assert threads_per_rank(threads, ranks) == each


#: (nodes, ranks, device, CPU cores, GPUs, the refusal's words or None).
PLACEMENTS = [
    (1, 1, "cpu", 2, 0, None),
    (2, 1, "cpu", 2, 0, None),
    (2, 4, "cpu", 2, 0, None),  # 8 processes on 2 cores: 4 a core, the most
    (3, 3, "cpu", 2, 0, "= 9 trainer processes, more than this machine's 2 CPU core(s) can run (at most 4 a core: 8)"),
    (1, 64, "auto", 4, 0, "= 64 trainer processes, more than this machine's 4 CPU core(s)"),
    (2, 4, "auto", 64, 8, None),  # one process per GPU
    (2, 8, "auto", 64, 8, "16 trainer processes, but this machine has 8 GPU(s) and every process needs its own"),
    (1, 2, "cuda", 8, 0, "on trainer.device = 'cuda', but this machine has no GPU"),
    (0, 1, "cpu", 2, 0, "trainer.nodes must be at least 1, not 0"),
    (1, -1, "cpu", 2, 0, "trainer.ranks must be at least 1, not -1"),
]


@pytest.mark.parametrize(("nodes", "ranks", "device", "cores", "gpus", "words"), PLACEMENTS)
def test_placement_says_what_this_machine_cannot_hold(nodes: int, ranks: int, device: str, cores: int, gpus: int,
                                                      words: str | None) -> None:
    problem = placement_problem(nodes, ranks, device=device, cpu_count=cores, gpu_count=gpus)
    if words is None:
        assert problem is None
    else:
        assert problem is not None and words in problem and "\n" not in problem


def _sleeper(code: int, seconds: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", f"import sys, time; time.sleep({seconds}); sys.exit({code})"])


@pytest.mark.slow
def test_a_node_group_is_one_process_to_its_caller() -> None:
    done = NodeGroup([_sleeper(0, 0), _sleeper(0, 0)])
    assert done.wait(timeout=120) == 0 and done.poll() == 0
    # One node fails: the group's code is that node's, and the node still running is stopped.
    failing = NodeGroup([_sleeper(0, 600), _sleeper(5, 0)])
    assert failing.wait(timeout=120) == 5
    assert all(p.poll() is not None for p in failing.procs)
    # terminate stops every node; a group still running answers None and times out on a short wait.
    running = NodeGroup([_sleeper(0, 600), _sleeper(0, 600)])
    assert running.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        running.wait(timeout=0.1)
    running.terminate()
    assert running.wait(timeout=120) != 0 and all(p.poll() is not None for p in running.procs)
    killed = NodeGroup([_sleeper(0, 600)])
    killed.kill()
    assert killed.wait(timeout=120) != 0
