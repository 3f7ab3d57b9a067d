"""``workbench launch --backend ray`` on a real two-node Ray cluster: a head and a worker started by
``ray start`` on 127.0.0.1, inside a network and PID namespace this module makes (``unshare``), so every
packet stays on loopback and every Ray process ends with the namespace. The launch runs there too
(``nsenter``): the trainer's two ranks are Ray actors in one placement group spread over both nodes, the
run streams into the local store. Then: a cluster short of the resources asked, a bundle that differs
from its hash on arrival, and a worker node lost mid-run (its raylet killed), which ends the run as
``failed`` with one line naming the node. Ray is the optional extra ``rl-workbench[ray]``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from workbench.store import Store

pytest.importorskip("torch")
pytest.importorskip("ray")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HEAD_PORT = 6399
WORKER_MANAGER_PORT = 6410  # names the worker's raylet among the namespace's processes
SMALL = ["--loop.groups_per_step", "2", "--loop.rollouts_per_task", "4", "--loop.max_tokens", "12",
         "--loop.concurrency", "8", "--loop.checkpoint_every", "0", "--loop.eval_every", "0", "--loop.eval_rollouts", "1",
         "--threads", "1"]
#: Ray in the namespace: no usage report, a node's death noticed within seconds, and no token authentication
#: (the cluster is reachable from its namespace's loopback only; a token a local ``ray.init()`` left in
#: ~/.ray would otherwise turn it on for the head and not for the nodes joining it).
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "4",
           "RAY_AUTH_MODE": "disabled"}
RAY = str(Path(sys.executable).parent / "ray")
START = f"""set -e
ip link set lo up
{RAY} start --head --node-ip-address 127.0.0.1 --port {HEAD_PORT} --num-cpus 2 --include-dashboard=false \
  --disable-usage-stats --object-store-memory 80000000 --resources '{{"wb_head": 1}}'
{RAY} start --address 127.0.0.1:{HEAD_PORT} --node-ip-address 127.0.0.1 --num-cpus 2 --disable-usage-stats \
  --object-store-memory 80000000 --node-manager-port {WORKER_MANAGER_PORT} --resources '{{"wb_worker": 1}}'
touch "$1"
exec sleep infinity
"""
#: Run inside the namespace: wait until both nodes are alive, print their ids.
NODES = f"""
import json, time, ray
ray.init(address="127.0.0.1:{HEAD_PORT}", logging_level="ERROR", log_to_driver=False)
deadline = time.monotonic() + 120
while True:
    alive = [n for n in ray.nodes() if n["Alive"]]
    if len(alive) == 2 or time.monotonic() > deadline:
        break
    time.sleep(0.2)
print(json.dumps({{"head": next(n["NodeID"] for n in alive if "wb_head" in n["Resources"]),
                  "worker": next(n["NodeID"] for n in alive if "wb_worker" in n["Resources"])}}))
"""


#: Where ``ray start --head`` records the newest cluster's address (Ray's temp directory).
CURRENT_CLUSTER = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.update(RAY_ENV, HF_HUB_OFFLINE="1", XDG_DATA_HOME=str(tmp / "data"), XDG_CONFIG_HOME=str(tmp / "config"),
               WORKBENCH_GPU_PRICES=str(tmp / "gpu_prices.json"))
    env.pop("RAY_ADDRESS", None)
    return env


@dataclass
class Cluster:
    """The namespace's first process (its host pid) and the two nodes' Ray ids."""

    pid: int
    head: str
    worker: str

    def prefix(self) -> list[str]:
        return ["nsenter", f"--target={self.pid}", "--net", "--pid", "--mount", f"--wd={ROOT}", "--"]

    def run(self, tmp: Path, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.prefix(), *argv], capture_output=True, text=True, env=_env(tmp), timeout=timeout)

    def workbench(self, tmp: Path, *args: str) -> list[str]:
        return [*self.prefix(), sys.executable, "-m", "workbench.cli", *args]


def _namespace_pid(unshare: subprocess.Popen[bytes], ready: Path) -> int:
    deadline = time.monotonic() + 180
    while not ready.exists():
        if unshare.poll() is not None or time.monotonic() > deadline:
            out = unshare.stdout.read().decode(errors="replace") if unshare.stdout else ""
            pytest.fail(f"the Ray cluster did not start in its namespace:\n{out[-3000:]}")
        time.sleep(0.1)
    children = Path(f"/proc/{unshare.pid}/task/{unshare.pid}/children").read_text().split()
    return int(children[0])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if not shutil.which("unshare") or not shutil.which("nsenter") or not shutil.which("ip"):
        pytest.skip("unshare, nsenter and ip (util-linux, iproute2) make the test's network namespace; not here")
    probe = subprocess.run(["unshare", "--net", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"this machine cannot make a network and PID namespace (unshare needs root): {probe.stderr.strip()}")
    tmp = tmp_path_factory.mktemp("ray")
    ready = tmp / "ready"
    unshare = subprocess.Popen(["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child", "bash", "-c",
                                START, "start", str(ready)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=_env(tmp), cwd=tmp)
    try:
        pid = _namespace_pid(unshare, ready)
        probe_nodes = subprocess.run(["nsenter", f"--target={pid}", "--net", "--pid", "--mount", "--", sys.executable,
                                      "-c", NODES], capture_output=True, text=True, env=_env(tmp), timeout=180)
        assert probe_nodes.returncode == 0, probe_nodes.stderr[-3000:]
        nodes = json.loads(probe_nodes.stdout.strip().splitlines()[-1])
        yield Cluster(pid, nodes["head"], nodes["worker"])
    finally:
        unshare.kill()  # --kill-child: the namespace's first process dies, and every Ray process with it
        unshare.wait(timeout=60)
        # the record of this module's head, gone with its namespace, would send a later plain ray.init() to it
        if CURRENT_CLUSTER.is_file() and CURRENT_CLUSTER.read_text().strip() == f"127.0.0.1:{HEAD_PORT}":
            CURRENT_CLUSTER.unlink()


def _error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("error")]


def _steps(db: Path, run_id: str) -> list[int]:
    store = Store(db)
    try:
        return [r["step"] for r in store.train_records(run_id, "step")]
    finally:
        store.close()


def _only_run(db: Path) -> dict[str, Any]:
    store = Store(db)
    try:
        runs = [dict(r) for r in store.conn.execute("SELECT id, status, error FROM run WHERE id NOT LIKE '%-eval%'")]
    finally:
        store.close()
    assert len(runs) == 1, runs
    return runs[0]


@pytest.mark.timeout(900)
def test_launch_trains_across_two_ray_nodes(cluster: Cluster, tiny_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "wb.db"
    out = cluster.run(tmp_path, sys.executable, "-m", "workbench.cli", "launch", "next_number", "--backend", "ray",
                      "--address", f"127.0.0.1:{HEAD_PORT}", "--nodes", "2", "--trainer.model", str(tiny_dir),
                      "--max-steps", "2", "--db", str(db), "--json", *SMALL)
    assert out.returncode == 0, out.stderr[-4000:]
    s = json.loads(out.stdout.strip().splitlines()[-1])
    assert s["status"] == "completed" and s["world_size"] == 2 and s["nodes"] == 2 and s["steps"] == 2
    assert _steps(db, s["run_id"]) == [1, 2]  # streamed into the local store
    store = Store(db)
    run = store.get_run(s["run_id"])
    assert run["status"] == "completed" and run["config"]["launch"]["backend"] == "ray"
    assert store.conn.execute("SELECT COUNT(*) FROM rollout WHERE run_id = ?", (s["run_id"],)).fetchone()[0] >= 16
    store.close()
    log = next((tmp_path / "data").rglob(f"runs/{s['run_id']}/trainer.log")).read_text(errors="replace")
    # one rank on each node: the placement group spread the trainer over the cluster
    assert f"trainer rank 0 of 2 on Ray node {cluster.head}" in log or f"trainer rank 0 of 2 on Ray node {cluster.worker}" in log
    placed = {ln.split("on Ray node ")[1].split()[0] for ln in log.splitlines() if " on Ray node " in ln}
    assert placed == {cluster.head, cluster.worker}, log[-3000:]
    assert "trainer rank 0 of 2" in log and "trainer rank 1 of 2: sharding fsdp" in log


def test_a_cluster_short_of_resources_is_refused_before_anything_starts(cluster: Cluster, tmp_path: Path) -> None:
    db = tmp_path / "wb.db"
    out = cluster.run(tmp_path, sys.executable, "-m", "workbench.cli", "launch", "next_number", "--backend", "ray",
                      "--address", f"127.0.0.1:{HEAD_PORT}", "--nodes", "3", "--db", str(db), *SMALL, timeout=300)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    lines = _error_lines(out.stderr)
    assert len(lines) == 1, out.stderr
    assert "trainer.nodes = 3 × trainer.ranks = 1" in lines[0] and "missing 1 node(s) with 1 CPU" in lines[0], lines[0]
    assert not (tmp_path / "data" / "workbench" / "remote").exists()
    if db.exists():
        store = Store(db)
        assert store.conn.execute("SELECT COUNT(*) FROM run").fetchone()[0] == 0
        store.close()


def test_a_plan_of_the_live_cluster_needs_its_gpus(cluster: Cluster, tmp_path: Path) -> None:
    out = cluster.run(tmp_path, sys.executable, "-m", "workbench.cli", "launch", "next_number", "--backend", "ray",
                      "--address", f"127.0.0.1:{HEAD_PORT}", "--plan", "--cloud.provider", "own", timeout=300)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    lines = _error_lines(out.stderr)
    assert len(lines) == 1 and f"the Ray cluster at 127.0.0.1:{HEAD_PORT} has no GPUs (2 live node(s), CPU only)" in lines[0]


#: A launch whose bundle changes after its hash was taken: what arrives is not what was hashed.
TAMPER = """
import sys
import workbench.bundles.bundle as bundles
build = bundles.build_bundle
def tampered(*args, **kwargs):
    bundle = build(*args, **kwargs)
    wheel = next(bundle.path.glob("*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"changed on the way")
    return bundle
bundles.build_bundle = tampered
from workbench.cli import main
sys.argv = ["workbench", *sys.argv[1:]]
sys.exit(main())
"""


def test_a_bundle_that_differs_from_its_hash_on_arrival_is_refused(cluster: Cluster, tiny_dir: Path,
                                                                   tmp_path: Path) -> None:
    db = tmp_path / "wb.db"
    out = cluster.run(tmp_path, sys.executable, "-c", TAMPER, "launch", "next_number", "--backend", "ray",
                      "--address", f"127.0.0.1:{HEAD_PORT}", "--trainer.model", str(tiny_dir), "--max-steps", "2",
                      "--db", str(db), *SMALL)
    assert out.returncode != 0, out.stdout[-2000:]
    lines = _error_lines(out.stderr)
    assert len(lines) == 1 and "refusing to run bundle" in lines[0], out.stderr[-3000:]
    run = _only_run(db)
    assert run["status"] == "failed" and "refusing to run bundle" in run["error"]
    assert _steps(db, run["id"]) == []
    assert not list((tmp_path / "data").rglob("trainer.log"))  # no trainer started


class Launch:
    """A ``workbench launch`` inside the namespace, its output in files (a Ray process it started may hold a
    pipe open after it exits, so nothing waits on its pipes)."""

    def __init__(self, cluster: Cluster, tmp: Path, *args: str) -> None:
        self.tmp = tmp
        self.out, self.err = tmp / "launch.out", tmp / "launch.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(cluster.workbench(tmp, "launch", *args), stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL, env=_env(tmp))

    def poll(self) -> int | None:
        return self.proc.poll()

    def finish(self, timeout: float) -> tuple[int, str, str]:
        """Its exit code, stdout and stderr once it ends; what it and the trainer said when it does not."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            logs = "".join(p.read_text(errors="replace")[-3000:] for p in (self.tmp / "data").rglob("trainer.log"))
            pytest.fail(f"the launch did not end within {timeout:g} s; its stderr:\n"
                        f"{self.err.read_text(errors='replace')[-3000:]}\ntrainer.log:\n{logs}")
        return code, self.out.read_text(errors="replace"), self.err.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def kill_outright(self) -> None:
        """SIGKILL the launch itself (nsenter's child: nsenter forks into the PID namespace), then nsenter."""
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        assert len(children) == 1, children
        os.kill(int(children[0]), signal.SIGKILL)
        self.proc.wait(timeout=60)


def _wait_for_metric(db: Path, proc: Launch, what: str, where: str, *args: str) -> None:
    """Until the store holds a ``train_metric`` row ``where`` says (the launch still running), for 600 s."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the launch ended before {what}: {proc.err.read_text()[-3000:]}"
        if db.exists():
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
                try:
                    if conn.execute(f"SELECT COUNT(*) FROM train_metric WHERE {where}", args).fetchone()[0]:
                        return
                except sqlite3.OperationalError:  # the store is being created
                    pass
        time.sleep(0.2)
    pytest.fail(f"no {what} within 600 s")


def _wait_for_step(db: Path, proc: Launch) -> None:
    _wait_for_metric(db, proc, "step", "kind = 'step'")


def _long_launch(cluster: Cluster, tiny_dir: Path, tmp_path: Path, db: Path) -> Launch:
    """A launch of 500 steps: it runs until the test ends it."""
    return Launch(cluster, tmp_path, "next_number", "--backend", "ray", "--address", f"127.0.0.1:{HEAD_PORT}",
                  "--trainer.model", str(tiny_dir), "--max-steps", "500", "--db", str(db), "--json", *SMALL)


@pytest.mark.timeout(900)
def test_stop_reaches_a_running_launch_through_the_cluster(cluster: Cluster, tiny_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "wb.db"
    proc = _long_launch(cluster, tiny_dir, tmp_path, db)
    try:
        _wait_for_step(db, proc)
        run_id = _only_run(db)["id"]
        with open(tmp_path / "follow.out", "wb") as out_f, open(tmp_path / "follow.err", "wb") as err_f:
            follower = subprocess.Popen(cluster.workbench(tmp_path, "runs", run_id, "--follow", "--db", str(db),
                                                          "--json"), stdout=out_f, stderr=err_f,
                                        stdin=subprocess.DEVNULL, env=_env(tmp_path))
        stopped = cluster.run(tmp_path, sys.executable, "-m", "workbench.cli", "stop", run_id, "--db", str(db),
                              timeout=120)
        assert stopped.returncode == 0, stopped.stderr[-3000:]
        code, out, err = proc.finish(300)
        followed = follower.wait(timeout=300)
    finally:
        proc.kill()
    assert code == 0, err[-3000:]
    s = json.loads(out.strip().splitlines()[-1])
    assert s["status"] == "stopped" and 1 <= s["steps"] < 500
    assert _only_run(db)["status"] == "stopped"
    # a second process followed the same run through the cluster to its end
    assert followed == 0, (tmp_path / "follow.err").read_text(errors="replace")[-3000:]
    shown = json.loads((tmp_path / "follow.out").read_text().strip().splitlines()[-1])
    assert shown["run"]["status"] == "stopped", shown


@pytest.mark.timeout(900)
def test_the_budget_stops_a_ray_run_priced_as_a_cluster_you_own(cluster: Cluster, tiny_dir: Path,
                                                                tmp_path: Path) -> None:
    db = tmp_path / "wb.db"
    priced = cluster.run(tmp_path, sys.executable, "-m", "workbench.cli", "gpu-prices", "set", "own", "cpu",
                         "--per-second", "0.01", timeout=120)
    assert priced.returncode == 0, priced.stderr[-3000:]
    proc = Launch(cluster, tmp_path, "next_number", "--backend", "ray", "--address", f"127.0.0.1:{HEAD_PORT}",
                  "--trainer.model", str(tiny_dir), "--max-steps", "200", "--budget", "0.03", "--db", str(db),
                  "--json", *SMALL)
    try:
        code, out, err = proc.finish(600)
    finally:
        proc.kill()
    assert code == 0, err[-3000:]
    s = json.loads(out.strip().splitlines()[-1])
    assert s["status"] == "stopped" and s["steps"] < 200 and s["spent_usd"] >= 0.03
    assert _only_run(db)["error"].startswith("budget reached: $")


#: Until the cluster holds nothing of a run: no named actor of it, no placement group not removed, no trainer
#: rank or inference server process in the namespace (120 s at most); prints what is left.
LEFT_ON_CLUSTER = f"""
import json, subprocess, sys, time, ray
ray.init(address="127.0.0.1:{HEAD_PORT}", logging_level="ERROR", log_to_driver=False)
run = sys.argv[1]
deadline = time.monotonic() + 120
while True:
    named = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if run in a["name"]]
    groups = [g["name"] for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]
    procs = subprocess.run(["pgrep", "-af", "workbench_local[.]training[.]launcher|workbench_local[.]server"],
                           capture_output=True, text=True).stdout.splitlines()
    if not (named or groups or procs) or time.monotonic() > deadline:
        break
    time.sleep(0.5)
print(json.dumps({{"named": named, "groups": groups, "processes": procs}}))
"""


@pytest.mark.timeout(900)
def test_a_launch_killed_outright_leaves_nothing_of_its_run_on_the_cluster(cluster: Cluster, tiny_dir: Path,
                                                                          tmp_path: Path) -> None:
    db = tmp_path / "wb.db"
    proc = _long_launch(cluster, tiny_dir, tmp_path, db)
    try:
        _wait_for_step(db, proc)
        run_id = _only_run(db)["id"]
        proc.kill_outright()  # nothing of the launch's own cleanup runs
    finally:
        proc.kill()
    left = cluster.run(tmp_path, sys.executable, "-c", LEFT_ON_CLUSTER, run_id, timeout=180)
    assert left.returncode == 0, left.stderr[-3000:]
    assert json.loads(left.stdout.strip().splitlines()[-1]) == {"named": [], "groups": [], "processes": []}


@pytest.mark.timeout(900)
def test_a_worker_node_lost_mid_run_fails_the_run_naming_it(cluster: Cluster, tiny_dir: Path,
                                                            tmp_path: Path) -> None:
    """Last in the module: it kills the worker node."""
    db = tmp_path / "wb.db"
    proc = Launch(cluster, tmp_path, "next_number", "--backend", "ray", "--address", f"127.0.0.1:{HEAD_PORT}",
                  "--nodes", "2", "--trainer.model", str(tiny_dir), "--max-steps", "500", "--db", str(db), *SMALL)
    try:
        _wait_for_step(db, proc)
        raylet = cluster.run(tmp_path, "pgrep", "-f", f"raylet.*--node_manager_port={WORKER_MANAGER_PORT}")
        pids = raylet.stdout.split()
        assert len(pids) == 1, raylet
        killed = cluster.run(tmp_path, "kill", "-9", pids[0])
        assert killed.returncode == 0, killed.stderr
        code, _, stderr = proc.finish(300)
    finally:
        proc.kill()
    assert code != 0
    lines = _error_lines(stderr)
    assert len(lines) == 1, stderr[-3000:]
    assert "was lost mid-run" in lines[0] and f"Ray node {cluster.worker[:12]}" in lines[0], lines[0]
    run = _only_run(db)
    assert run["status"] == "failed" and f"Ray node {cluster.worker[:12]}" in run["error"]
    assert _steps(db, run["id"])  # the steps before the loss are in the store


#: Two more worker nodes for the resumed run (after the first worker was lost): (node-manager port, resource).
EXTRA = [(6411, "wb_extra_a"), (6412, "wb_extra_b")]
EXTRA_NODES = f"""
import json, time, ray
ray.init(address="127.0.0.1:{HEAD_PORT}", logging_level="ERROR", log_to_driver=False)
deadline = time.monotonic() + 120
names = {[r for _, r in EXTRA]!r}
while True:
    alive = [n for n in ray.nodes() if n["Alive"]]
    found = {{r: n["NodeID"] for n in alive for r in names if r in n["Resources"]}}
    if len(found) == len(names) or time.monotonic() > deadline:
        break
    time.sleep(0.2)
print(json.dumps(found))
"""


def _wait_for_event(db: Path, proc: Launch, prefix: str) -> None:
    _wait_for_metric(db, proc, f"an event {prefix!r}", "kind = 'event' AND message LIKE ?", prefix + "%")


@pytest.mark.timeout(900)
def test_a_run_that_checkpoints_continues_on_the_nodes_left(cluster: Cluster, tiny_dir: Path, tmp_path: Path) -> None:
    """After the lost worker: two more workers join, a run that checkpoints loses one of its nodes, and the
    launch continues it from its last checkpoint on the two nodes left."""
    for port, resource in EXTRA:
        started = cluster.run(tmp_path, RAY, "start", "--address", f"127.0.0.1:{HEAD_PORT}", "--node-ip-address",
                              "127.0.0.1", "--num-cpus", "2", "--disable-usage-stats", "--object-store-memory", "80000000",
                              "--node-manager-port", str(port), "--resources", json.dumps({resource: 1}), timeout=180)
        assert started.returncode == 0, started.stderr[-3000:]
    found = cluster.run(tmp_path, sys.executable, "-c", EXTRA_NODES, timeout=180)
    extra = json.loads(found.stdout.strip().splitlines()[-1])
    assert len(extra) == 2, found.stderr[-2000:]
    db = tmp_path / "wb.db"
    small = [a for a in SMALL]
    small[small.index("--loop.checkpoint_every") + 1] = "2"
    proc = Launch(cluster, tmp_path, "next_number", "--backend", "ray", "--address", f"127.0.0.1:{HEAD_PORT}",
                  "--nodes", "2", "--trainer.model", str(tiny_dir), "--max-steps", "40", "--db", str(db), "--json",
                  *small)
    try:
        _wait_for_event(db, proc, "checkpoint saved at step ")
        log = next((tmp_path / "data").rglob("trainer.log")).read_text(errors="replace")
        placed = {ln.split("on Ray node ")[1].split()[0] for ln in log.splitlines() if " on Ray node " in ln}
        port, resource = next((p, r) for p, r in EXTRA if extra[r] in placed)  # a worker that holds a rank
        raylet = cluster.run(tmp_path, "pgrep", "-f", f"raylet.*--node_manager_port={port}")
        assert len(raylet.stdout.split()) == 1, raylet
        assert cluster.run(tmp_path, "kill", "-9", raylet.stdout.split()[0]).returncode == 0
        code, out, err = proc.finish(600)
    finally:
        proc.kill()
    assert code == 0, err[-4000:]
    s = json.loads(out.strip().splitlines()[-1])
    assert s["status"] == "completed" and s["world_size"] == 2 and s["steps"] == 40
    assert _steps(db, s["run_id"])[-1] == 40
    store = Store(db)
    events = [r["message"] for r in store.train_records(s["run_id"], "event")]
    store.close()
    assert any(m.startswith("resumed from the checkpoint of step ") for m in events), events
    # the resumed orchestrator sampled nothing before the trainer said which policy it resumed from
    assert not any(m.startswith("dropped a whole batch") for m in events), events
    log = next((tmp_path / "data").rglob("trainer.log")).read_text(errors="replace")
    assert f"Ray node {extra[resource][:12]}" in log and "was lost mid-run" in log, log[-3000:]
