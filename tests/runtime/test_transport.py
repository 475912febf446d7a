"""transport.backend_for: NCCL only when target and draft each have their own CUDA device."""

from __future__ import annotations

import pytest

from ssd_runtime.transport import backend_for


@pytest.mark.parametrize("devices, backend", [
    (("cpu", "cpu"), "gloo"),
    (("cuda:0", "cpu"), "gloo"),
    (("cuda:0", "cuda:1"), "nccl"),
    (("cuda:0", "cuda:0"), "gloo"),  # NCCL refuses two ranks on one GPU
    (("cuda", "cuda:0"), "gloo"),  # "cuda" is cuda:0
    (("cuda", "cuda:1"), "nccl"),
])
def test_backend_for(devices, backend):
    assert backend_for(*devices) == backend
