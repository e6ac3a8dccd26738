"""``--hierarchy hooks`` scopes against torch's own Python tracer, on a small real torch model profiled twice.

The model has what numbering and nesting depend on: several instances of one class, one instance called many
times (``shared``), layers called in reverse order of construction, and a module nested in a module of its own
class. Both traces are real torch.profiler exports; the trees are built by phaseprof's loader and module tree.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest

from phaseprof.analysis.modules import build_module_tree, module_names
from phaseprof.capture.inprocess.module_scopes import ModuleScopes
from phaseprof.classify.rules import load_rules
from phaseprof.trace.read import load_tables
from phaseprof.trace.tables import MODULE_PREFIX

torch = pytest.importorskip("torch")
nn = torch.nn


class Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


class Block(nn.Module):
    def __init__(self, inner: bool) -> None:
        super().__init__()
        self.norm, self.proj, self.out = Scale(), nn.Linear(8, 8), Scale()
        self.inner = Block(False) if inner else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.out(self.proj(self.norm(x)))
        return self.inner(x) if self.inner is not None else x


class Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(inner=i == 1) for i in range(3)])
        self.shared = Scale()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in reversed(self.layers):
            x = self.shared(layer(x))
        return x


def _profile(tmp: Path, *, hooks: bool) -> Path:
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    torch.manual_seed(0)
    model, x = Toy(), torch.randn(2, 8)
    scopes = ModuleScopes()
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], with_stack=not hooks) as prof:
        with scopes if hooks else nullcontext():
            model(x)
            model(x)
    out = tmp / ("hooks.json" if hooks else "stack.json")
    prof.export_chrome_trace(str(out))
    return out


def _tree(path: Path) -> list[tuple[str, str | None]]:
    """(module call, its parent call) per call, in start order: names carry class and instance number."""
    tables = load_tables(path)
    tree = build_module_tree(tables.modules, load_rules())
    names = module_names(tree)
    order = np.argsort(tree.frame["ts_ns"].to_numpy(), kind="stable")
    return [(names[i], None if tree.parent[i] < 0 else names[tree.parent[i]]) for i in order]


def _no_global_hooks() -> bool:
    from torch.nn.modules import module as m  # noqa: PLC0415

    return not (m._global_forward_pre_hooks or m._global_forward_hooks or m._global_forward_hooks_always_called)


def test_hook_scopes_give_the_python_tracers_tree(tmp_path: Path) -> None:
    stack, hooks = _tree(_profile(tmp_path, hooks=False)), _tree(_profile(tmp_path, hooks=True))
    # reversed layers: the last-built Block is Block_0; the nested Block is numbered when first called
    assert stack[:3] == [("nn.Module: Toy_0", None), ("nn.Module: Block_0", "nn.Module: Toy_0"),
                         ("nn.Module: Scale_0", "nn.Module: Block_0")]
    assert ("nn.Module: Block_2", "nn.Module: Block_1") in stack  # a Block inside a Block
    assert sum(n == "nn.Module: Scale_2" for n, _ in stack) == 6  # shared: 3 calls per forward, 2 forwards
    assert hooks == stack
    assert _no_global_hooks()


def test_scopes_are_structure_not_work(tmp_path: Path) -> None:
    """The loader files hook scopes (cpu_op events) under modules, never under ops (CPU traces' work items)."""
    tables = load_tables(_profile(tmp_path, hooks=True))
    assert len(tables.modules) == 2 * 20  # per forward: Toy, 4 Blocks with 3 children each, 3 calls of shared
    assert not tables.ops["name"].astype(str).str.startswith(MODULE_PREFIX).any()
    assert (tables.ops["name"].astype(str) == "aten::linear").sum() == 2 * 4


def test_hooks_are_removed_and_scopes_closed_when_forward_raises() -> None:
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    class Boom(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    model = nn.Sequential(Scale(), Boom())
    scopes = ModuleScopes()
    with profile(activities=[ProfilerActivity.CPU]), pytest.raises(RuntimeError, match="boom"):
        with scopes:
            model(torch.randn(2, 8))
    assert _no_global_hooks() and scopes.calls == 3
    assert scopes._stack() == []  # always_call closed Boom's and Sequential's scopes on the way out


@pytest.mark.filterwarnings("ignore:Using `torch.compile\\(module\\)` when there are global hooks")
def test_hooks_leave_compiled_graphs_alone() -> None:
    """Compiled while the hooks are installed, the graph holds the model's ops and no profiler scope."""
    graphs: list = []

    def backend(gm, _inputs):  # noqa: ANN001, ANN202
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    model = Block(inner=False)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    with ModuleScopes() as scopes:
        compiled(torch.randn(2, 8))
    torch._dynamo.reset()
    # only the wrappers torch calls eagerly get scopes (OptimizedModule, the backend's GraphModule): layers.toml
    # files both as opaque; the modules traced into the graph get none
    seen = {n.split(": ")[1].rsplit("_", 1)[0] for n in scopes._names.values()}
    assert graphs and seen <= {"OptimizedModule", "GraphModule"}
    targets = {str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"}
    assert any("linear" in t for t in targets)
    assert not [t for t in targets if "profiler" in t or "record_function" in t.lower()], targets
