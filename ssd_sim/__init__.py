"""ssd_sim: closed forms, fan-out and Saguaro math, profiles, planner and simulator for SSD.

Pure Python + numpy/scipy/simpy: never imports torch, streamlit or ssd_runtime.
"""

__version__ = "0.1.0"
