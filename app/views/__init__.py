"""Dashboard pages: scripts run by st.navigation (a package only so that wheels ship them)."""
