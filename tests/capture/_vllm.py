"""One cached answer to "does `import vllm` work here?" for the capture tests' skip logic."""

from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def vllm_import_error() -> str | None:
    try:
        import vllm  # noqa: F401, PLC0415
    except Exception as e:  # noqa: BLE001 - any import failure means no engine here
        return f"{type(e).__name__}: {e}"
    return None


def skip_without_vllm() -> None:
    """pytest.skip with the import error and the install command when vLLM cannot be imported."""
    err = vllm_import_error()
    if err is not None:
        pytest.skip(f"`import vllm` fails ({err}); install the CPU engine: pip install 'phaseprof[cpu]'")
