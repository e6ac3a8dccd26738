"""The dashboard's Memory page calls the same library functions as the CLI and draws without errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from phaseprof.dashboard.text import md
from phaseprof.dashboard.views import memory as view
from phaseprof.memory import MemoryInputs, build_memory_plan
from phaseprof.memory.render import sections
from tests.memory.configs import qwen35_35b_a3b


class FakeStreamlit:
    """Records calls; widgets return their default value (what a first page load shows)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.sidebar = self

    def __getattr__(self, name: str):
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            if name == "selectbox":
                return args[1][kwargs.get("index", 0)]
            if name in {"slider", "number_input", "checkbox", "text_input"}:
                return kwargs.get("value")
            return None
        return call

    def named(self, name: str) -> list[tuple[tuple, dict]]:
        return [(a, k) for n, a, k in self.calls if n == name]


@pytest.fixture()
def model_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(qwen35_35b_a3b(fp8=True)))
    return str(tmp_path)


def test_page_builds_the_cli_plan_from_sidebar_inputs(model_dir):
    st = FakeStreamlit()
    inputs = MemoryInputs(model=model_dir, gpu="H100-SXM", max_model_len=8192, cudagraph_max_size=8192,
                          max_num_batched_tokens=8192, prefix_caching=False)
    plan = view.show(st, inputs)
    assert plan == build_memory_plan(inputs)                       # the same function, the same numbers
    tables = [a[0] for a, _ in st.named("table")]
    assert len(tables) == len(sections(plan))
    block = tables[0].set_index("quantity")["value"]
    assert block["block size"] == "1,056 tokens"
    assert any(md("Tried to allocate 16.50 GiB") in a[0] for a, _ in st.named("warning"))
    fig = st.named("plotly_chart")[0][0][0]
    names = [bar.name for bar in fig.data]
    assert "CUDA-graph scratch (OOM)" in names and any(n.startswith("KV cache") for n in names)


def test_bad_inputs_show_one_error_line(model_dir):
    st = FakeStreamlit()
    assert view.show(st, MemoryInputs(model=model_dir, gpu="H100", max_model_len=8192, tp=3)) is None
    [(args, _)] = st.named("error")
    assert md("--tp 3 does not divide") in args[0] and "\n" not in args[0]


def test_a_finished_plan_is_shown_without_a_sidebar():
    plan = build_memory_plan(MemoryInputs(model="x", gpu="H200"), hf_config=qwen35_35b_a3b())
    st = FakeStreamlit()
    assert view.show(st, plan) is plan
    assert not st.named("selectbox") and st.named("table")


def test_real_streamlit_runs_the_page(model_dir):
    from streamlit.testing.v1 import AppTest

    def page(model_dir: str) -> None:
        import streamlit as st

        from phaseprof.dashboard.views import memory
        from phaseprof.memory import MemoryInputs

        memory.show(st, MemoryInputs(model=model_dir, gpu="H200", max_model_len=8192))

    at = AppTest.from_function(page, args=(model_dir,), default_timeout=60).run()
    assert not at.exception, at.exception
    assert not at.error
    assert len(at.table) >= 4 and "Memory" in at.header[0].value
    gpu = next(w for w in at.sidebar.selectbox if w.label == "GPU")
    assert gpu.value == "H200"
    gpu.set_value("H100-SXM").run()
    assert not at.exception
    assert any("H100" in sub.value for sub in at.subheader)
