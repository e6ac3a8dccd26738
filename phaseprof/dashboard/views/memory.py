"""The dashboard's "Memory" page: the same plan as ``phaseprof memory``, with its inputs in the sidebar.

The page is ``render(st, ctx)`` like every page. ``show`` mounts it elsewhere: ``show(st)`` (sidebar inputs,
defaults = vLLM's), ``show(st, MemoryInputs(...))`` (sidebar pre-filled) or ``show(st, plan)`` (a finished
MemoryPlan, no sidebar). Every number comes from ``phaseprof.memory.build_memory_plan`` and the row builders
of ``phaseprof.memory.render``, as in the CLI; every string from a config or a log is escaped for markdown.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pandas as pd

from phaseprof.dashboard import widgets
from phaseprof.dashboard.text import md, md_frame, plot
from phaseprof.errors import PhaseprofError
from phaseprof.memory import defaults as D
from phaseprof.memory.dtypes import KV_CACHE_DTYPES, MAMBA_DTYPES
from phaseprof.memory.facts import STARTUP_LOG
from phaseprof.memory.gpus import known_gpu_names, lookup_gpu
from phaseprof.memory.plan import MemoryInputs, MemoryPlan, build_memory_plan
from phaseprof.memory.render import comparison_rows, headline, sections
from phaseprof.records import RunDir

CUSTOM_MODEL = "(a directory with config.json)"


def _presets() -> list[str]:
    try:
        from phaseprof.presets import list_presets
    except ImportError:
        return []
    return list_presets()


def _index(options: list[Any], value: Any) -> int:
    return options.index(value) if value in options else 0


def _catalogue_name(name: str) -> str:
    """A GPU name as the catalogue spells it (an alias such as "H100" selects "H100-SXM"); unknown: as given."""
    try:
        return lookup_gpu(name).name
    except PhaseprofError:
        return name


def sidebar_inputs(st: Any, defaults: MemoryInputs | None = None) -> MemoryInputs:
    """Sidebar widgets → MemoryInputs. 0 in a number box means "vLLM's default"."""
    presets = _presets()
    d = defaults or MemoryInputs(model=("qwen3.5-35b-a3b" if "qwen3.5-35b-a3b" in presets else
                                        presets[0] if presets else ""), gpu="H200")
    sb = st.sidebar
    sb.header("Memory plan")
    options = [*presets, CUSTOM_MODEL]
    is_preset = d.model in presets
    choice = sb.selectbox("model (preset)", options, index=_index(options, d.model if is_preset else CUSTOM_MODEL))
    model = choice
    if choice == CUSTOM_MODEL:
        model = sb.text_input("config directory", value="" if is_preset else d.model)
    gpus = known_gpu_names()
    gpu = sb.selectbox("GPU", gpus, index=_index(gpus, _catalogue_name(d.gpu or "H200")))
    util = sb.slider("gpu_memory_utilization", min_value=0.05, max_value=1.0,
                     value=float(d.gpu_memory_utilization), step=0.01)
    max_len = sb.number_input("max_model_len (0 = config's)", min_value=0, value=int(d.max_model_len or 0), step=1024)
    tokens = sb.number_input("request tokens (0 = max_model_len)", min_value=0, value=int(d.tokens or 0), step=1024)
    kv = sb.selectbox("kv_cache_dtype", list(KV_CACHE_DTYPES), index=_index(list(KV_CACHE_DTYPES), d.kv_cache_dtype))
    ssm = sb.selectbox("mamba_ssm_cache_dtype", list(MAMBA_DTYPES), index=_index(list(MAMBA_DTYPES), d.mamba_ssm_dtype))
    cap = sb.number_input("max CUDA-graph capture size (0 = vLLM's)", min_value=0,
                          value=int(d.cudagraph_max_size or 0), step=64)
    seqs = sb.number_input("max_num_seqs (0 = vLLM's)", min_value=0, value=int(d.max_num_seqs or 0), step=1)
    tp = sb.number_input("tensor parallel size", min_value=1, value=int(d.tp), step=1)
    version = sb.selectbox("vLLM rules", list(D.VLLM_VERSIONS), index=_index(list(D.VLLM_VERSIONS), d.vllm_version))
    prefix = sb.checkbox("prefix caching", value=d.prefix_caching)
    eager = sb.checkbox("enforce eager (no CUDA graphs)", value=d.enforce_eager)
    run_dir = sb.text_input("capture run directory (optional)", value=d.run_dir or "")
    return replace(d, model=model, gpu=gpu, gpu_memory_gib=None, gpu_memory_utilization=float(util),
                   max_model_len=int(max_len) or None, tokens=int(tokens) or None, kv_cache_dtype=kv,
                   mamba_ssm_dtype=ssm, cudagraph_max_size=int(cap) or None, max_num_seqs=int(seqs) or None,
                   tp=int(tp), vllm_version=version, prefix_caching=bool(prefix), enforce_eager=bool(eager),
                   run_dir=run_dir or None)


def budget_figure(plan: MemoryPlan) -> Any:
    """Stacked bar of the device's memory (GiB): the budget's consumers, the KV cache, the unrequested rest;
    beside it the CUDA-graph scratch against the memory free when it is allocated."""
    import plotly.graph_objects as go

    fig = go.Figure()
    b = plan.budget
    if b is not None:
        segments = [(i.name + (" (unknown)" if i.bytes is None else ""), i.bytes or 0) for i in b.items]
        segments += [("KV cache" + (" (upper bound)" if b.kv_is_upper_bound else ""), b.kv_cache_bytes),
                     ("outside gpu_memory_utilization", b.total_bytes - b.requested_bytes)]
        for name, n in segments:
            fig.add_bar(name=plot(name), x=[n / D.GIB], y=["budget"], orientation="h")
    sc = plan.scratch
    if sc.applies and sc.free_bytes is not None:
        fig.add_bar(name="free at capture", x=[sc.free_bytes / D.GIB], y=["scratch check"], orientation="h")
        fig.add_bar(name="CUDA-graph scratch" + (" (OOM)" if sc.exceeds_free else ""),
                    x=[sc.scratch_bytes / D.GIB], y=["scratch vs free"], orientation="h")
    fig.update_layout(barmode="stack", xaxis_title="GiB", height=380,  # legend under the axis, not on it
                      legend=dict(orientation="h", yanchor="top", y=-0.35, x=0),
                      title=f"{plot(plan.budget.gpu_name) if b else 'no GPU given'}: where memory goes")
    return fig


def show_plan(st: Any, plan: MemoryPlan) -> None:
    st.header("Memory")
    st.caption(md(headline(plan)))
    for w in plan.warnings:
        st.warning(md(w))
    for title, rows in sections(plan):
        st.subheader(md(title))
        st.table(md_frame(pd.DataFrame(rows, columns=["quantity", "value", "how"])))
    if plan.facts is not None:
        st.subheader(f"vLLM's logged facts ({md(plan.facts.source)})")
        st.table(md_frame(pd.DataFrame(comparison_rows(plan),
                                       columns=["fact", "predicted", "logged", "difference", "note"])))
    if plan.layout.predicted_log_lines:
        st.subheader("vLLM should log")
        st.code("\n".join(plan.layout.predicted_log_lines), language="text")
    if plan.budget is not None or plan.scratch.free_bytes is not None:
        widgets.chart(st, budget_figure(plan), key="memory_budget")


def _guarded(inputs: MemoryInputs, roots: Any) -> MemoryInputs:
    """Typed paths (a config directory, a capture run directory) must lie under the dashboard's runs directory,
    and so must the files read from them (``config.json``, ``run.json``, the startup log: a link inside the
    runs directory may lead elsewhere): the dashboard reads nothing else from the machine."""
    from phaseprof.dashboard.sources import guard_members, resolve_user_path

    model = inputs.model
    if model and model not in _presets():
        path = resolve_user_path(model, roots)
        if path.is_dir():
            guard_members(path, ("config.json",), roots)
        model = str(path)
    run_dir = None
    if inputs.run_dir:
        path = resolve_user_path(inputs.run_dir, roots)
        if path.is_dir():
            guard_members(path, (RunDir.RECORD, STARTUP_LOG), roots)
        run_dir = str(path)
    return replace(inputs, model=model, run_dir=run_dir)


def render(st: Any, ctx: Any) -> None:
    """The dashboard page: sidebar inputs; typed paths must lie under the runs directory."""
    show(st, roots=ctx.roots)


def show(st: Any, plan_or_inputs: MemoryPlan | MemoryInputs | None = None, *, roots: Any = None) -> MemoryPlan | None:
    """Draw the Memory page; returns the plan shown (None when the inputs were rejected). ``roots``: the
    dashboard's readable roots; when given, typed paths outside them are refused."""
    if isinstance(plan_or_inputs, MemoryPlan):
        show_plan(st, plan_or_inputs)
        return plan_or_inputs
    inputs = sidebar_inputs(st, plan_or_inputs)
    try:
        if roots is not None:
            inputs = _guarded(inputs, roots)
        plan = build_memory_plan(inputs)
    except PhaseprofError as e:
        st.error(md(str(e)))
        return None
    show_plan(st, plan)
    return plan
