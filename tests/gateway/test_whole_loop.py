"""The whole loop of docs/gateway.md, end to end on the embedded model, every step the command a user types: the
product's model served, a gateway in front of it, the product (docs/examples/gateway_loop/product.py, the real
openai SDK) sending its traffic and its users' feedback, `tasks from-traffic` with the product's own check as the
rubric, `train` on that environment, its adapter served, the candidate in shadow, then promoted to half the
traffic without a restart, and `compare --traffic --env` on both. Real processes, HTTP on 127.0.0.1, SQLite."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.support import Running, rows_of
from tests.helpers import last_json, stop_process, wait_for, workbench_argv

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "gateway_loop"


@pytest.fixture
def serve(env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., str]]:
    """``serve(model_dir, *args)``: `workbench serve` on a free port; its base URL once it is ready."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(model: Path, *args: str) -> str:
        ready = tmp_path / f"serve-{len(procs)}.ready"
        log = open(tmp_path / f"serve-{len(procs)}.log", "wb")  # noqa: SIM115 - the server's until it stops
        proc = subprocess.Popen([*workbench_argv(), "serve", "--model", str(model), "--served-model-name", "tiny",
                                 "--port", "0", "--ready-file", str(ready), "--threads", "1", *args], env=env,
                                stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        wait_for(lambda: ready.is_file() and ready.stat().st_size > 0, 180, "the model server ready", proc=proc)
        return f"http://127.0.0.1:{json.loads(ready.read_text())['port']}/v1"

    yield start
    for p in procs:
        stop_process(p)


def _product(gw: Running, key: str, env: dict[str, str], n: int) -> dict[str, int]:
    out = subprocess.run([sys.executable, str(EXAMPLE / "product.py"), str(n)], capture_output=True, text=True,
                         timeout=300, env={**env, "GATEWAY": gw.root, "WORKBENCH_GATEWAY_KEY": key})
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.timeout(900)
def test_traffic_becomes_an_environment_trains_a_candidate_that_goes_back_as_shadow_then_split(
        tiny_dir: Path, serve: Callable[..., str], gateway: Callable[..., Running], cli: Callable[..., Any],
        env: dict[str, str], tmp_path: Path, store_path: Path) -> None:
    def ok(*args: Any, timeout: float = 120) -> Any:
        res = cli(*args, env=env, timeout=timeout)
        assert res.rc == 0, f"{args}: {res.stderr[-3000:]}"
        return last_json(res.stdout) if "--json" in args else res.stdout

    ok("models", "add", "base", "--base-url", serve(tiny_dir), "--model-id", "tiny")
    key = ok("gateway", "keys", "add", "demo", "--json")["key"]
    gw = gateway("--route", "support=base")
    assert _product(gw, key, env, 16) == {"base": 16}
    gw.stop()

    made = ok("tasks", "from-traffic", tmp_path / "support_env", "--judge", "none", "--rubric",
              EXAMPLE / "counts_on.py", "--held-out", "0.25", "--json")
    assert (made["tasks"], made["train"], made["held_out"], made["rubric"]) == (16, 12, 4, ["counts_on"])
    trained = ok("train", tmp_path / "support_env", "--trainer.model", tiny_dir, "--max-steps", "2",
                 "--loop.groups_per_step", "2", "--loop.rollouts_per_task", "4", "--loop.max_tokens", "12",
                 "--loop.concurrency", "8", "--loop.checkpoint_every", "0", "--loop.eval_every", "0",
                 "--loop.eval_tasks", "4", "--threads", "1", "--json", timeout=600)
    assert trained["steps"] == 2
    adapter = Path(env["XDG_DATA_HOME"]) / "workbench" / "runs" / trained["run_id"] / "final"
    assert (adapter / "adapter_config.json").is_file()

    ok("models", "add", "cand", "--base-url", serve(tiny_dir, "--adapter", f"cand={adapter}"), "--model-id", "cand")
    gw = gateway("--route", "support=base", "--shadow", "support=cand")
    assert _product(gw, key, env, 16) == {"base": 16}  # the candidate answers too, never to the product
    wait_for(lambda: sum(json.loads(r["state"]).get("arm") == "cand" for r in rows_of(store_path)) == 16, 180,
             "the shadow's answers recorded")
    promoted = ok("gateway", "promote", "support", "cand:0.5", "--json")
    assert promoted["spec"] == "support=cand:0.5,base:0.5"
    split = _product(gw, key, env, 40)  # the running gateway, promoted without a restart
    assert set(split) == {"base", "cand"} and sum(split.values()) == 40
    gw.stop()

    compared = ok("compare", "--traffic", "support", "--baseline", "base", "--env", tmp_path / "support_env",
                  "--json")
    base, cand = compared["arms"]
    assert (base["arm"], base["exchanges"], cand["arm"], cand["exchanges"]) == ("base", 32 + split["base"], "cand",
                                                                                  split["cand"])
    assert base["rated"] == base["exchanges"] and cand["rated"] == cand["exchanges"]  # the product rated each
    [shadow] = compared["shadows"]
    assert shadow["arm"] == "cand" and shadow["exchanges"] == 16 and shadow["rubric"]["pairs"] == 16
    assert shadow["rubric"]["ci_method"] in ("paired bootstrap", "none")
    rubric = compared["rubric"]
    assert rubric["scored"] == 16 + 16 + 16 + 40 and rubric["matched"] == 16 * 3 + 16  # the numbers 0..15 again
    # the product's feedback and the rubric are the same check: they agree on every answer the product rated
    assert base["rubric"]["mean"] == pytest.approx(base["mean_feedback"])
    assert cand["rubric"]["mean"] == pytest.approx(cand["mean_feedback"])
    runs = ok("runs", "--kind", "gateway", "--json")["runs"]
    assert sum(r["rollouts"] for r in runs) == 88 and not any(r["errors"] for r in runs)  # traffic is never scored
