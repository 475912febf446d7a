#!/usr/bin/env bash
# GPU smoke test: tiny models of every supported family and (when cached) the real Qwen2.5-Coder pair with
# ssd-run's target and draft processes on one CUDA device (and on two where present: the NCCL path), greedy
# AR == SD == SSD, tok/s of each, one table at the end. Runs on an offline GPU machine as it is: it installs
# nothing and downloads nothing (the project runs from this folder; the real pair is used only if
# `ssd-run fetch-models` put it in the cache, or with --fetch). Under 5 minutes on one GPU.
#
#   bash bench/gpu_smoke.sh                    # CUDA
#   bash bench/gpu_smoke.sh --device cpu       # CPU fallback: tiny models and families (add --real for the real pair)
#   PYTHON=/path/to/python bash bench/gpu_smoke.sh --no-real
#
# Other flags go to bench/gpu_smoke.py (--help). Exit status: 0 all ran cases passed, 1 a case failed or outputs
# differ, 2 bad input or missing packages (one line saying which).
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
    echo "gpu_smoke: error: no python3 found; set PYTHON=/path/to/python" >&2
    exit 2
fi

# what ssd_runtime needs at run time (not the planner's or dashboard's extras)
missing=$("$PY" -c 'import importlib.util as u
print(" ".join(m for m in ("torch", "transformers", "safetensors", "numpy", "tqdm") if u.find_spec(m) is None))')
if [[ -n "$missing" ]]; then
    echo "gpu_smoke: error: $PY lacks the Python packages: $missing (this script installs nothing; e.g." \
         "$PY -m pip install -e '.[runtime]' where a package index is reachable)" >&2
    exit 2
fi

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" bench/gpu_smoke.py "$@"
