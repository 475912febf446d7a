"""Tests, one folder per package of the project (ssd_sim layers, runtime, app, bench)."""
