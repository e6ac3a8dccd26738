"""Serving sweeps to a pareto frontier: per-point serving metrics, the frontier across configurations, the
capacity wall from the memory plan, and a speed-of-light floor behind every point (``phaseprof pareto``)."""
