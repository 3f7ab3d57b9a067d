#!/usr/bin/env bash
# Set up what Workbench and its tests need: the system packages and the Docker engine
# (scripts/system_setup.sh: installed and started when run as root with apt, named otherwise), then the
# project's virtual environment in .venv. Idempotent and quick when nothing changed: the venv is
# reinstalled only when pyproject.toml, setup.py or this script changes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/system_setup.sh"
VENV="${WORKBENCH_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
STAMP="$VENV/.workbench-setup"
want="$(cat "$ROOT/pyproject.toml" "$ROOT/setup.py" "$ROOT/scripts/setup.sh" | sha256sum | cut -c1-16)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  exit 0
fi
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "Workbench needs Python 3.11 or newer (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
# torch first, as the CPU build: a plain `torch` requirement would pull a multi-GB CUDA build.
if ! "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
  "${PIP[@]}" "torch==2.13.0" ${WORKBENCH_TORCH_INDEX:+--index-url "$WORKBENCH_TORCH_INDEX"}
fi
# cloud: the Modal SDK, for launch and its offline tests; hf: TaskSet.from_hf; inspect: importing its
# logs, tested against the real package; openai-evals: imported evals' similarity metrics; ray: the Ray
# launch backend, tested on a two-node cluster on this machine
"${PIP[@]}" -e "$ROOT[tui,local,dev,cloud,hf,inspect,openai-evals,ray]"
echo "$want" > "$STAMP"
