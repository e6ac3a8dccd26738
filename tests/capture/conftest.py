"""Capture tests: tests marked ``vllm`` run the real CPU engine and are skipped (with the reason) only when
``import vllm`` fails. The others are pure and fast."""

from __future__ import annotations

import pytest

from tests.capture._vllm import skip_without_vllm


@pytest.fixture(autouse=True)
def _skip_without_vllm(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("vllm") is not None:
        skip_without_vllm()
