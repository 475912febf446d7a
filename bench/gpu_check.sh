#!/usr/bin/env bash
# GPU check of the runtime at real model shapes (random weights, bf16): per-forward latency eager vs compiled vs the
# weight-bytes roofline, per-round overhead beyond the forwards, host syncs per round, AR / SD / SSD tok/s at forced
# acceptance 0.7 and 1.0 (b = 1, 8), exactness (greedy AR == SD == SSD, a chi-square of the verify rule). Runs on an
# offline GPU machine as it is: installs nothing, downloads nothing, the project runs from this folder. Under 8
# minutes (--max-seconds, default 420); the rows go to runs/gpu_check.jsonl as they are measured (--out).
#
#   bash bench/gpu_check.sh                                  # CUDA
#   bash bench/gpu_check.sh --out "$OUT/gpu_check.jsonl"     # rows elsewhere
#   bash bench/gpu_check.sh --device cpu --quick             # the CPU fallback (scaled shapes, float32)
#
# Other flags go to bench/gpu_check.py (--help). Exit status: 0 every check that ran passed, 1 one failed, 2 bad input
# or missing packages (one line saying which), 130 / 143 interrupted (the table of what was measured is printed).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ -n "${PYTHON:-}" ]]; then
    PY="$PYTHON"
elif [[ -x .venv/bin/python ]]; then
    PY=.venv/bin/python
else
    PY=$(command -v python3 || command -v python || true)
fi
if [[ -z "$PY" ]]; then
    echo "gpu_check: error: no python3 found; set PYTHON=/path/to/python" >&2
    exit 2
fi

missing=$("$PY" -c 'import importlib.util as u
print(" ".join(m for m in ("torch", "transformers", "safetensors", "numpy", "scipy", "rich") if u.find_spec(m) is None))')
if [[ -n "$missing" ]]; then
    echo "gpu_check: error: $PY lacks the Python packages: $missing (this script installs nothing; e.g." \
         "$PY -m pip install -e '.[runtime]' where a package index is reachable)" >&2
    exit 2
fi

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" bench/gpu_check.py "$@"
