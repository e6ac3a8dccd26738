"""Thin Streamlit entry for a source checkout: ``streamlit run dashboards/app.py -- --runs-dir DIR``.

The app itself is part of the installed package (``phaseprof/dashboard/app.py``, which is what
``phaseprof dashboard`` runs); this file only calls it.
"""

from phaseprof.dashboard.app import main

main()
