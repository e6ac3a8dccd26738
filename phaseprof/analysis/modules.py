"""The module tree: PyTorch's ``nn.Module: Class_N`` scopes as a tree, and which module and layer each work item ran in.

A trace recorded ``with_stack`` (vLLM's own profiler does by default) holds one ``python_function`` event per
module ``forward`` call, named ``nn.Module: <Class>_<instance>``; calls nest by time on their host thread. Every
host call (a kernel's launch call, or a CPU op on CPU-only traces) lies inside its innermost module call.

Per module call this computes:

- ``label``: the module-view bucket it stands for: the first ``[[module]]`` rule (default.toml) matching it or,
  walking outwards, an enclosing call (``GemmaRMSNorm`` -> norm, ``QwenGatedDeltaNetAttention`` -> gdn, a linear
  inside ``Qwen3NextSparseMoeBlock`` -> moe). A call that no rule names on its whole path keeps the class name of
  its block (the decoder layer's child, or the model's child outside layers), e.g. ``LogitsProcessor``: shown under
  its own name, never folded into another bucket. A dense MLP (``layers.toml`` ``dense_mlp_patterns``:
  ``LlamaMLP``) that no rule names on its path takes the bucket ``mlp``, its calls with it; inside a MoE block
  (the shared expert) the block's rule comes first, so it stays ``moe``. Inside torch.compile containers (``GraphModule``) the
  structure is hidden, and work directly in the model's own forward (the root call) names no component: such
  calls get no label (None) and their kernels keep the kernel view.
- ``layer``: the decoder layer instance it runs in (``layers.toml``), or -1 outside any layer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from phaseprof.classify.buckets import Bucket
from phaseprof.classify.classifier import module_bucket_of_op
from phaseprof.classify.rules import RuleSet
from phaseprof.errors import PhaseprofError
from phaseprof.trace.correlate import _innermost_ops, _op_parents
from phaseprof.trace.tables import MODULE_PREFIX, labels

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

LAYERS_PATH = Path(__file__).parents[1] / "classify" / "rules" / "layers.toml"
_INSTANCE = re.compile(r"^(.*)_(\d+)$")


@dataclass(frozen=True)
class LayerRules:
    """Which module classes are decoder layers, and how a layer's type is read (``layers.toml``)."""

    layer: tuple[re.Pattern[str], ...]
    mixer_buckets: tuple[str, ...]
    ffn_buckets: tuple[str, ...]
    dense_mlp: tuple[re.Pattern[str], ...]
    opaque: tuple[re.Pattern[str], ...] = ()
    model: tuple[re.Pattern[str], ...] = ()
    boundary: tuple[re.Pattern[str], ...] = ()  # kernel names that open the next block (``[boundary]``)
    dense_bucket: str = "mlp"  # module-view bucket of a dense feed-forward (``[layer_type] dense_mlp_bucket``)

    def is_boundary(self, kernel: str) -> bool:
        return any(p.search(kernel) for p in self.boundary)

    def is_model(self, cls: str) -> bool:
        return any(p.search(cls) for p in self.model)

    def is_opaque(self, cls: str) -> bool:
        return any(p.search(cls) for p in self.opaque)

    def is_layer(self, cls: str) -> bool:
        return any(p.search(cls) for p in self.layer)

    def is_dense_mlp(self, cls: str) -> bool:
        return any(p.search(cls) for p in self.dense_mlp)


@lru_cache(maxsize=1)
def load_layer_rules(path: Path = LAYERS_PATH) -> LayerRules:
    """Read ``layers.toml``; every example must match its patterns (PhaseprofError naming the file otherwise)."""
    try:
        data = tomllib.loads(path.read_text())
        lay, typ = data["layer"], data["layer_type"]
        rules = LayerRules(layer=tuple(re.compile(p) for p in lay["patterns"]),
                           mixer_buckets=tuple(typ["mixer_buckets"]), ffn_buckets=tuple(typ["ffn_buckets"]),
                           dense_mlp=tuple(re.compile(p) for p in typ["dense_mlp_patterns"]),
                           opaque=tuple(re.compile(p) for p in data.get("opaque", {}).get("patterns", [])),
                           model=tuple(re.compile(p) for p in data.get("model", {}).get("patterns", [])),
                           boundary=tuple(re.compile(p) for p in data.get("boundary", {}).get("patterns", [])),
                           dense_bucket=str(typ.get("dense_mlp_bucket", "mlp")))
    except (OSError, KeyError, TypeError, re.error, tomllib.TOMLDecodeError) as e:
        raise PhaseprofError(f"bad layer rules: {e}", path=path) from None
    for ex in lay.get("examples", []):
        if not rules.is_layer(ex):
            raise PhaseprofError(f"[layer] example {ex!r} matches none of its patterns", path=path)
    for ex in data.get("model", {}).get("examples", []):
        if not rules.is_model(ex):
            raise PhaseprofError(f"[model] example {ex!r} matches none of its patterns", path=path)
    for ex in data.get("opaque", {}).get("examples", []):
        if not rules.is_opaque(ex):
            raise PhaseprofError(f"[opaque] example {ex!r} matches none of its patterns", path=path)
    for ex in data.get("boundary", {}).get("examples", []):
        if not rules.is_boundary(ex):
            raise PhaseprofError(f"[boundary] example {ex!r} matches none of its patterns", path=path)
    if rules.dense_bucket not in {b.value for b in Bucket}:
        raise PhaseprofError(f"[layer_type] dense_mlp_bucket {rules.dense_bucket!r} is not a bucket", path=path)
    for ex in typ.get("dense_mlp_examples", []):
        if not rules.is_dense_mlp(ex):
            raise PhaseprofError(f"[layer_type] example {ex!r} matches no dense_mlp pattern", path=path)
    return rules


@dataclass(frozen=True)
class ModuleTree:
    """One row per ``nn.Module`` forward call (rows of ``EventTables.modules``), built once per trace."""

    frame: pd.DataFrame  # the modules table (ts_ns, end_ns, pid, tid, name)
    parent: np.ndarray  # enclosing module call, -1 at the top
    cls: np.ndarray  # class name (``Qwen3NextDecoderLayer``)
    label: np.ndarray  # module-view bucket or block class name, None inside opaque containers (module docstring)
    matched: np.ndarray  # True where ``label`` came from a rule (else it is a class name)
    layer: np.ndarray  # decoder layer index, -1 outside layers
    layer_types: dict[int, str]  # layer index -> "gdn+moe", "attention+dense", ...

    @property
    def empty(self) -> bool:
        return len(self.frame) == 0

    def innermost(self, host: pd.DataFrame) -> np.ndarray:
        """Innermost module call enclosing each row of ``host`` (same thread, by start time), or -1."""
        if self.empty or host.empty:
            return np.full(len(host), -1, dtype=np.int64)
        return _innermost_ops(host, self.frame, self.parent)


def build_module_tree(modules: pd.DataFrame, rules: RuleSet, layer_rules: LayerRules | None = None) -> ModuleTree:
    """Nest the module calls, label them through the module rules, and find their decoder layers."""
    lr = layer_rules or load_layer_rules()
    n = len(modules)
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return ModuleTree(modules, z, np.zeros(0, dtype=object), np.zeros(0, dtype=object), np.zeros(0, bool), z, {})
    parent = _op_parents(modules)
    names = modules["name"]
    cats = [str(c) for c in names.cat.categories]
    # Per distinct name (a few hundred), not per call: class, instance, rule match, layer-ness.
    cls_c, inst_c, rule_c, is_layer_c, opaque_c, model_c, dense_c = [], [], [], [], [], [], []
    for full in cats:
        short = full[len(MODULE_PREFIX):] if full.startswith(MODULE_PREFIX) else full
        m = _INSTANCE.match(short)
        cls_c.append(m.group(1) if m else short)
        inst_c.append(int(m.group(2)) if m else -1)
        b = module_bucket_of_op(full, rules)
        rule_c.append(None if b is None else str(b))
        is_layer_c.append(lr.is_layer(cls_c[-1]))
        opaque_c.append(lr.is_opaque(cls_c[-1]))
        model_c.append(lr.is_model(cls_c[-1]))
        dense_c.append(lr.is_dense_mlp(cls_c[-1]))
    code = names.cat.codes.to_numpy()
    cls = np.asarray(cls_c, dtype=object)[code]
    inst = np.asarray(inst_c, dtype=np.int64)[code]
    own = np.asarray(rule_c, dtype=object)[code]
    is_layer = np.asarray(is_layer_c, dtype=bool)[code]
    opq = np.asarray(opaque_c, dtype=bool)[code].tolist()
    mdl = np.asarray(model_c, dtype=bool)[code].tolist()
    dense = np.asarray(dense_c, dtype=bool)[code].tolist()
    ts, end = modules["ts_ns"].to_numpy(), modules["end_ns"].to_numpy()
    # Parents first (they start no later and last longer); a sequential pass over module calls only (thousands).
    order = np.lexsort((-(end - ts), ts)).tolist()
    par, own_l, cls_l, inst_l, isl = parent.tolist(), own.tolist(), cls.tolist(), inst.tolist(), is_layer.tolist()
    rule: list[str | None] = [None] * n
    block: list[str | None] = [""] * n
    layer = [-1] * n
    for i in order:
        p = par[i]
        rule[i] = own_l[i] if own_l[i] is not None else (rule[p] if p >= 0 else None)
        if rule[i] is None and dense[i]:  # a dense MLP no rule covers; inside a MoE block it stays moe (above)
            rule[i] = lr.dense_bucket
        if isl[i]:
            layer[i], block[i] = inst_l[i], cls_l[i]
            continue
        layer[i] = layer[p] if p >= 0 else -1
        # the block: the layer's child, the model's child, or a call outside the model (LogitsProcessor runs
        # after the forward); work directly in the model's own forward has no block: it names no component
        top = p < 0 or isl[p] or mdl[p]
        if opq[i] or mdl[i] or (p >= 0 and block[p] is None and not top):
            block[i] = None
        else:
            block[i] = cls_l[i] if top else block[p]
    matched = np.asarray([r is not None for r in rule], dtype=bool)
    label = np.asarray([r if r is not None else b for r, b in zip(rule, block)], dtype=object)
    layer_a = np.asarray(layer, dtype=np.int64)
    return ModuleTree(frame=modules, parent=parent, cls=cls, label=label, matched=matched, layer=layer_a,
                      layer_types=_layer_types(layer_a, label, cls, lr))


def _layer_types(layer: np.ndarray, label: np.ndarray, cls: np.ndarray, lr: LayerRules) -> dict[int, str]:
    """Type of each layer from what ran inside it: mixer (gdn / attention) + feed-forward (moe / dense)."""
    out: dict[int, str] = {}
    frame = pd.DataFrame({"layer": layer, "label": label, "cls": cls})
    for k, g in frame[frame["layer"] >= 0].groupby("layer"):
        labs, classes = set(g["label"]), set(g["cls"])
        mixer = next((b for b in lr.mixer_buckets if b in labs), "other")
        ffn = next((b for b in lr.ffn_buckets if b in labs), None)
        if ffn is None:
            ffn = "dense" if any(lr.is_dense_mlp(c) for c in classes) else "none"
        elif ffn == lr.dense_bucket:
            ffn = "dense"
        out[int(k)] = f"{mixer}+{ffn}"
    return out


def module_classes(tree: ModuleTree) -> list[str]:
    """Distinct module classes seen, in order of first call (for reports and tests)."""
    if tree.empty:
        return []
    order = np.argsort(tree.frame["ts_ns"].to_numpy(), kind="stable")
    return list(dict.fromkeys(tree.cls[order].tolist()))


def module_names(tree: ModuleTree) -> np.ndarray:
    """Full ``nn.Module: Class_N`` name of each call, as Python strings."""
    return labels(tree.frame["name"])
