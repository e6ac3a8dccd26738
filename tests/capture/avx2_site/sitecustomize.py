"""Put this directory on PYTHONPATH (after the repository root) to run every Python process of a test session
on an AVX2-only CPU's code paths, subprocesses included (``tests/capture/force_avx2.py`` says what is forced)."""

import tests.capture.force_avx2  # noqa: F401
