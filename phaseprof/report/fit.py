"""Kept importable from here: the terminal-fitting helpers live in ``phaseprof/render/fit.py``, a layer below
``report`` that ``sol`` and ``scale`` print with too."""

from phaseprof.render.fit import FOLD_MIN_WIDTH, Col, cell_len, fitted_tables, print_fitted, split_columns

__all__ = ["FOLD_MIN_WIDTH", "Col", "cell_len", "fitted_tables", "print_fitted", "split_columns"]
