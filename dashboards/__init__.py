"""phaseprof dashboard (Streamlit): run with ``phaseprof dashboard [RUNS_DIR]``."""
