#!/usr/bin/env bash
# What the sandbox tests and runtimes need from the system: bubblewrap (wb.Local's isolation),
# busybox-static (the offline sandbox image), a running Docker engine (wb.Docker) and Node with npm
# (the real agent programs and MCP servers the sandbox tests run), and podman (Harbor's own runs). As root with
# apt it installs and starts them; otherwise it says in one line what is missing and how to add it.
# Idempotent and quick when everything is there. Set WORKBENCH_SKIP_SYSTEM=1 to skip it.
set -euo pipefail
[[ ${WORKBENCH_SKIP_SYSTEM:-0} == 1 ]] && exit 0
root=0; [[ $(id -u) == 0 ]] && root=1

need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v busybox >/dev/null || need+=(busybox-static)
command -v dockerd >/dev/null || need+=(docker.io)
command -v iptables >/dev/null || need+=(iptables)
command -v node >/dev/null || need+=(nodejs)  # agent programs and MCP servers the sandbox tests run
command -v npm >/dev/null || need+=(npm)
if ((${#need[@]})); then
  if ((root)) && command -v apt-get >/dev/null; then
    echo "setup: installing ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "setup: not installed: ${need[*]} (wb.Local and wb.Docker sandboxes need them; their tests skip); install with: sudo apt-get install ${need[*]}" >&2
  fi
fi

# podman, with what it recommends (its runtime helpers): `harbor run`, the oracle of the Harbor tests, runs its
# tasks with podman here, as Debian has no `docker compose` plugin for its Docker environment.
if ! command -v podman >/dev/null; then
  if ((root)) && command -v apt-get >/dev/null; then
    echo "setup: installing podman" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq podman >/dev/null
  else
    echo "setup: not installed: podman (the Harbor oracle tests skip); install with: sudo apt-get install podman" >&2
  fi
fi

docker_up() { timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
if command -v docker >/dev/null && ! docker_up; then
  if ((root)) && command -v dockerd >/dev/null; then
    log=/var/log/workbench-dockerd.log
    for attempt in default vfs; do
      opts=()
      [[ $attempt == vfs ]] && opts=(--storage-driver=vfs)  # where overlayfs is not available
      echo "setup: starting dockerd (${attempt}); log in $log" >&2
      setsid nohup dockerd "${opts[@]}" >"$log" 2>&1 < /dev/null &
      dockerd_pid=$!
      for _ in $(seq 60); do docker_up && break; sleep 1; done
      docker_up && break
      kill "$dockerd_pid" 2>/dev/null || true  # the dockerd this script started, by its pid
      sleep 2
    done
    docker_up || { echo "setup: dockerd did not start (the wb.Docker tests skip); last log lines:" >&2; tail -5 "$log" >&2; }
  elif command -v dockerd >/dev/null; then
    echo "setup: the Docker engine is not running (wb.Docker needs it; its tests skip); start it with: sudo systemctl start docker" >&2
  fi
fi
exit 0
