"""Harbor itself, as the oracle of Workbench's Harbor format: `harbor run` in a Python 3.12 virtual environment
of its own, on Podman with a private store and configuration, and the rewards its trials wrote.

Harbor needs Python >= 3.12 and Workbench runs on 3.11, so Harbor never enters Workbench's environment: it is
installed (once, cached) into a virtual environment beside the test run's caches. Its Podman environment drives
the ``podman`` CLI through podman-compose, whose 1.x releases from the package index speak the dialect Harbor
expects (Debian bookworm's 1.0.3 lacks ``--in-pod`` and ``down --rmi``), so the virtual environment holds both.

Podman keeps its images, containers and settings under a folder the caller names (``CONTAINERS_CONF``,
``CONTAINERS_STORAGE_CONF``), so nothing system-wide changes and the store is reset afterwards.
"""

from __future__ import annotations

import glob
import json
import os
import re
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HARBOR_VERSION = "0.26.0"
PODMAN_COMPOSE_VERSION = "1.6.0"

#: Harbor runs every command of a trial as ``bash -c``; the busybox sandbox image has only ``sh``. Inside
#: Podman's private store the base image gains a ``bash`` that is its ``sh``, under the same name, so the
#: tasks' Dockerfiles build unchanged (Workbench's own runs use Docker's image, which has no ``bash``).
BASH_SHIM_DOCKERFILE = """FROM {image}
RUN printf '#!/bin/sh\\nexec /bin/sh "$@"\\n' > /bin/bash && chmod 755 /bin/bash
"""

#: Podman raises a container's open-file and process limits to its defaults (1048576), above what a nested
#: machine's limits allow runc to set ("error setting rlimit ... operation not permitted").
MAX_PROCESSES = 4096


def find_python312() -> str | None:
    """A Python >= 3.12 on this machine that runs (pyenv's shims may not): under pyenv, on PATH, or one uv
    knows; None if there is none."""
    pyenv = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates = sorted(glob.glob(f"{pyenv}/versions/3.1[2-9]*/bin/python3"))
    candidates += [found for name in ("python3.12", "python3.13", "python3.14") if (found := shutil.which(name))]
    uv = uv_binary()
    if uv:
        known = subprocess.run([uv, "python", "find", ">=3.12"], capture_output=True, text=True, timeout=60)
        if known.returncode == 0 and known.stdout.strip():
            candidates.append(known.stdout.strip())
    for candidate in candidates:
        try:
            runs = subprocess.run([candidate, "-c", "import sys; assert sys.version_info >= (3, 12)"],
                                  capture_output=True, timeout=60)
        except OSError:
            continue
        if runs.returncode == 0:
            return candidate
    return None


def uv_binary() -> str | None:
    beside = Path(sys.executable).with_name("uv")
    return str(beside) if beside.exists() else shutil.which("uv")


def harbor_venv(python: str, cache: Path) -> Path:
    """The virtual environment with Harbor and podman-compose, built under ``cache`` on first use."""
    venv = cache / f"harbor-{HARBOR_VERSION}-podman-compose-{PODMAN_COMPOSE_VERSION}"
    harbor = venv / "bin" / "harbor"
    if harbor.exists() and (venv / "bin" / "podman-compose").exists():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    requirements = [f"harbor=={HARBOR_VERSION}", f"podman-compose=={PODMAN_COMPOSE_VERSION}"]
    uv = uv_binary()
    if uv:
        steps = [[uv, "venv", "-q", "-p", python, str(venv)],
                 [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *requirements]]
    else:
        steps = [[python, "-m", "venv", str(venv)],
                 [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *requirements]]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            raise RuntimeError(f"building Harbor's virtual environment failed: {' '.join(step)}: "
                               f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return venv


def harbor_copy(task: Path, dest: Path) -> Path:
    """``task`` copied for Harbor on an offline machine: its default network, and a name in ``org/name`` form."""
    shutil.copytree(task, dest, symlinks=True)
    toml = dest / "task.toml"
    text = re.sub(r'(?m)^\s*(allow_internet\s*=\s*false|network_mode\s*=\s*"no-network")\s*\n', "", toml.read_text())
    text = re.sub(r'(?m)^(name\s*=\s*")([^"/]+")', r"\1workbench/\2", text)
    toml.write_text(text)
    return dest


def podman_settings(root: Path, driver: str) -> dict[str, str]:
    """Write a containers.conf and a storage.conf under ``root``; the variables that make Podman use them."""
    root.mkdir(parents=True, exist_ok=True)
    open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    open_files = 1048576 if open_files == resource.RLIM_INFINITY else min(open_files, 1048576)
    processes = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    processes = MAX_PROCESSES if processes == resource.RLIM_INFINITY else min(processes, MAX_PROCESSES)
    conf = root / "containers.conf"
    conf.write_text(
        "[containers]\n"
        f'default_ulimits = ["nofile={open_files}:{open_files}", "nproc={processes}:{processes}"]\n'
        "[engine]\n"
        'cgroup_manager = "cgroupfs"\n'  # no systemd in a container or CI job
        'events_logger = "file"\n')
    storage = root / "storage.conf"
    storage.write_text(f'[storage]\ndriver = "{driver}"\ngraphroot = "{root / "graph"}"\nrunroot = "{root / "run"}"\n')
    return {"CONTAINERS_CONF": str(conf), "CONTAINERS_STORAGE_CONF": str(storage)}


@dataclass
class Podman:
    """The ``podman`` CLI on a private store."""

    env: dict[str, str]

    def run(self, *args: str, stdin: bytes | None = None, timeout: float = 300) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["podman", *args], input=stdin, capture_output=True, env=self.env, timeout=timeout)

    def check(self, *args: str, stdin: bytes | None = None, timeout: float = 300) -> bytes:
        done = self.run(*args, stdin=stdin, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args)} failed: {done.stderr.decode(errors='replace').strip()}")
        return done.stdout


def start_podman(root: Path) -> Podman:
    """Podman on a private store under ``root`` that can run a container: overlay, else vfs."""
    last = ""
    for driver in ("overlay", "vfs"):
        env = {**os.environ, **podman_settings(root / driver, driver)}
        podman = Podman(env)
        info = podman.run("info", timeout=60)
        if info.returncode == 0:
            return podman
        last = info.stderr.decode(errors="replace").strip()
    raise RuntimeError(f"podman cannot start on this machine: {last}")


def load_base_image(podman: Podman, image: str, build_dir: Path) -> None:
    """Copy ``image`` from the Docker engine into Podman's store (no registry), with Harbor's ``bash``."""
    saved = subprocess.run(["docker", "save", image], capture_output=True, timeout=300)
    if saved.returncode != 0:
        raise RuntimeError(f"docker save {image} failed: {saved.stderr.decode(errors='replace').strip()}")
    podman.check("load", stdin=saved.stdout)
    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / "Dockerfile").write_text(BASH_SHIM_DOCKERFILE.format(image=f"localhost/{image}"))
    podman.check("build", "-q", "-t", f"localhost/{image}", str(build_dir))
    podman.check("run", "--rm", f"localhost/{image}", "bash", "-c", "true")  # a container runs


@dataclass
class Trial:
    """One trial of a Harbor job: the task folder it ran, its rewards, or the exception that ended it."""

    task: str
    rewards: dict[str, float] | None
    exception: str | None


def harbor_run(venv: Path, podman: Podman, tasks: Path, agent: str, jobs: Path, name: str,
               concurrency: int = 1, timeout: float = 1200) -> list[Trial]:
    """``harbor run`` of ``agent`` (``oracle``, ``nop``) on every task of the dataset folder ``tasks``.

    One trial at a time by default: Harbor builds each task's image at its trial's start, and Podman 4.3's
    concurrent builds of the same layers can fail ("layer not known"), an error of the engine, not the task.
    """
    env = {**podman.env,
           "PATH": f"{venv / 'bin'}{os.pathsep}{podman.env.get('PATH', '')}",  # its podman-compose
           "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch of the model price list (no network needed)
           "NO_COLOR": "1"}
    argv = [str(venv / "bin" / "harbor"), "run", "--path", str(tasks), "--agent", agent, "--env", "podman",
            "--jobs-dir", str(jobs), "--job-name", name, "--n-concurrent", str(concurrency), "--yes", "--quiet"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"harbor run failed (exit {done.returncode}): {(done.stderr + done.stdout)[-3000:]}")
    return read_trials(jobs / name)


def read_trials(job: Path) -> list[Trial]:
    trials = []
    for result in sorted(job.glob("*/result.json")):
        data = json.loads(result.read_text())
        verifier = data.get("verifier_result") or {}
        exception = data.get("exception_info") or {}
        trials.append(Trial(task=Path(data["config"]["task"]["path"]).name,
                            rewards=verifier.get("rewards"),
                            exception=exception.get("exception_type")))
    return trials


def trial_log(job: Path, task: str) -> str:
    """The last lines of a task's trial log, for a failure's message."""
    logs = sorted(job.glob(f"{task}__*/trial.log"))
    return logs[0].read_text(errors="replace")[-3000:] if logs else f"(no trial log for {task} in {job})"
