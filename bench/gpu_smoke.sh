#!/usr/bin/env bash
# GPU smoke test (issue 13, item 4): tiny models and the real Qwen2.5-Coder pair with ssd-run's target and draft
# processes on one CUDA device (and on two where present: the NCCL path), greedy AR == SD == SSD, tok/s of each,
# one table at the end. Unattended on a fresh machine with a CUDA build of torch; under 5 minutes on one GPU once
# the models are fetched.
#
#   bash bench/gpu_smoke.sh                    # CUDA (fetches the real pair with `ssd-run fetch-models` if missing)
#   bash bench/gpu_smoke.sh --device cpu       # CPU fallback: tiny models only (add --real for the real pair)
#   PYTHON=/path/to/python bash bench/gpu_smoke.sh --no-real --no-fetch
#
# Other flags go to bench/gpu_smoke.py (--help). Exit status: 0 all ran cases passed, 1 a case failed or outputs
# differ, 2 bad input (e.g. no CUDA device without --device cpu).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ -n "${PYTHON:-}" ]]; then
    PY="$PYTHON"
elif [[ -x .venv/bin/python ]]; then
    PY=.venv/bin/python
else
    PY=$(command -v python3 || command -v python)
fi

have_ssd_run() {
    [[ -x "$(dirname "$PY")/ssd-run" ]] || command -v ssd-run >/dev/null 2>&1
}

if ! have_ssd_run || ! "$PY" -c "import ssd_runtime, torch, transformers" >/dev/null 2>&1; then
    echo "gpu_smoke: installing the package: $PY -m pip install -e .[runtime]" >&2
    if ! "$PY" -m pip install -q -e ".[runtime]"; then
        # offline machines: torch and transformers may already be there; install only this package
        echo "gpu_smoke: that failed; trying pip install --no-deps --no-build-isolation -e ." >&2
        "$PY" -m pip install -q --no-deps --no-build-isolation -e . || true
    fi
    if ! "$PY" -c "import ssd_runtime, torch, transformers" >/dev/null 2>&1; then
        echo "gpu_smoke: error: cannot import ssd_runtime, torch and transformers with $PY; install a CUDA torch" \
             "and run: $PY -m pip install -e .[runtime]" >&2
        exit 1
    fi
fi

exec "$PY" bench/gpu_smoke.py "$@"
