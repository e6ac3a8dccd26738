"""The ``sol`` section's types, defined beside the breakdown that carries them (``analysis/sol_results.py``:
a breakdown is read and written without the speed-of-light code); kept importable from here."""

from phaseprof.analysis.sol_results import SolBucket, SolCeiling, SolMoeLayer, SolPhase, SolSection, SolStep

__all__ = ["SolBucket", "SolCeiling", "SolMoeLayer", "SolPhase", "SolSection", "SolStep"]
