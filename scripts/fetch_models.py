"""Fetch, verify and convert the default Qwen2.5-Coder model pair (same as `ssd-run fetch-models`)."""

from ssd_runtime.cli import fetch_main

if __name__ == "__main__":
    import sys

    raise SystemExit(fetch_main(sys.argv[1:]))
