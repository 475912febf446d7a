"""Streamlit + Plotly what-if dashboard over ssd_sim (`streamlit run app/dashboard.py` or `ssd-dashboard`).

The app only lays numbers out: every model quantity comes from ssd_sim (see ssd_sim/plan/whatif.py and ssd_sim/plan/compare.py).
"""
