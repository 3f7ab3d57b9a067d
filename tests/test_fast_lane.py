"""The fast lane (``./scripts/test -m "not slow"``, docs/testing.md) keeps tests of every part of the product:
each folder of tests/ holds tests the lane runs, and so does the module of each face.

The check reads the tests this session collected when they already show it (the whole suite, or the fast
lane itself); otherwise it collects the fast lane in a subprocess, which is what a failure is judged on.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO

#: Each folder of tests/ and what it tests: a new folder is added here, and keeps fast tests.
AREAS = {
    "app": "the app (workbench_app)",
    "cloud": "the cloud runtime (workbench_cloud)",
    "envs": "the bundled environments (workbench_envs)",
    "formats": "other tools' formats read and written (workbench.formats)",
    "gateway": "the gateway: a product's traffic through Workbench (workbench.gateway)",
    "frameworks": "other frameworks' environments, run in their own Python environments (workbench.frameworks)",
    "hub": "the hub (workbench.hub)",
    "local_runtime": "the local runtime (workbench_local): the embedded server, generation, the trainer's loop",
    "sandbox": "the sandboxes (workbench.authoring.sandbox, workbench_local.sandbox)",
    "security": "what hostile input meets, across the product",
    "store": "the store (workbench.store)",
    "training": "training (workbench.training)",
    "workbench": "the domain (workbench) and the CLI (workbench.cli)",
}

#: The face each module drives: the fast lane runs some of its tests.
FACES = {
    "the CLI": "tests/workbench/test_eval_e2e.py",
    "the Python API": "tests/workbench/test_api.py",
    "workbench mcp": "tests/workbench/test_mcp_server.py",
    "the app": "tests/app/test_app.py",
}


def _gaps(fast: set[str]) -> list[str]:
    """What has no fast test, given the files (``tests/…/test_x.py``) that hold fast tests."""
    folders = {path.split("/")[1] for path in fast if path.count("/") >= 2}
    missing = [f"tests/{area}/ ({what})" for area, what in AREAS.items() if area not in folders]
    return missing + [f"{module} ({face})" for face, module in FACES.items() if module not in fast]


def _collected_fast(session: pytest.Session) -> set[str]:
    return {item.nodeid.split("::")[0] for item in session.items if not item.get_closest_marker("slow")}


def _fast_lane_files() -> tuple[set[str], str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not slow",
                           "-p", "no:cacheprovider", "tests"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {line.split("::")[0] for line in proc.stdout.splitlines() if "::" in line}, proc.stdout[-500:]


def test_every_folder_of_tests_is_an_area() -> None:
    folders = {p.parent.name for p in (REPO / "tests").glob("*/test_*.py")}
    assert folders == set(AREAS), f"add the new folder to AREAS, or remove the gone one: {folders ^ set(AREAS)}"


def test_every_area_and_face_keeps_fast_tests(request: pytest.FixtureRequest) -> None:
    if not _gaps(_collected_fast(request.session)):
        return  # this session's own tests show it
    fast, tail = _fast_lane_files()
    assert not _gaps(fast), f"no test outside the slow mark for: {_gaps(fast)}\n{tail}"
