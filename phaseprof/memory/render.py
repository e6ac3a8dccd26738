"""Presentation of a MemoryPlan: rows of (quantity, value, how) shared by the CLI's rich tables and the
dashboard's Memory page. Rendering only: every number comes from the plan."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from phaseprof.memory.defaults import GIB, KIB, MIB
from phaseprof.memory.plan import MemoryPlan

Row = tuple[str, str, str]


def fmt_bytes(n: int | None) -> str:
    """Exact bytes plus a binary unit; sizes past 1 GiB also in decimal GB, as vendors and seeds quote them."""
    if n is None:
        return "unknown"
    if abs(n) >= GIB:
        return f"{n / GIB:,.2f} GiB ({n / 1e9:,.1f} GB)"
    if abs(n) >= MIB:
        return f"{n / MIB:,.3f} MiB ({n:,} B)"
    if abs(n) >= KIB:
        return f"{n / KIB:,.2f} KiB ({n:,} B)"
    return f"{n:,} B"


def headline(p: MemoryPlan) -> str:
    s = p.shape
    return (f"{p.model_source}: {s.architecture}, {s.num_layers} layers = {s.num_attention_layers} attention"
            + (f" + {s.num_gdn_layers} GDN" if s.num_gdn_layers else "") + f", {s.model_dtype}, weights "
            f"{p.weights.params / 1e9:.2f}B params = {fmt_bytes(p.weights.bytes_per_gpu)} per GPU ({p.weights.format})")


def block_rows(p: MemoryPlan) -> list[Row]:
    L, s = p.layout, p.shape
    kvh = max(1, s.num_kv_heads // p.cache.tensor_parallel_size)
    rows = [("attention KV / token / layer", fmt_bytes(L.attn_bytes_per_token_per_layer),
             f"2 x {kvh} kv heads x {s.head_dim} x {L.kv_dtype}")]
    if L.gdn:
        g = L.gdn
        rows += [("GDN conv state / request / layer", fmt_bytes(g.conv_bytes), f"{g.conv_shape} x {g.conv_dtype}"),
                 ("GDN SSM state / request / layer", fmt_bytes(g.ssm_bytes),
                  f"{g.ssm_shape} x {g.ssm_dtype} ({g.ssm_dtype_source})"),
                 ("GDN state / request / layer", fmt_bytes(g.state_bytes), "conv + SSM = unpadded mamba page")]
    rows += [("block size", f"{L.block_size_tokens:,} tokens",
              f"{L.kernel_alignment_tokens} x cdiv(mamba page, {L.kernel_alignment_tokens} x attn page/token)"
              if L.gdn else "CacheConfig.DEFAULT_BLOCK_SIZE"),
             ("page (one layer, one block)", fmt_bytes(L.page_bytes), "block size x attention KV / token / layer"),
             ("block across attention layers", fmt_bytes(L.attention_block_bytes_all_layers),
              f"page x {L.num_attention_layers} attention layers")]
    if L.gdn:
        rows += [("mamba page padding", f"{L.mamba_padding_pct:.2f}%",
                  f"{fmt_bytes(L.mamba_padding_bytes)} per GDN page"),
                 ("GDN blocks / request / layer", str(L.gdn_blocks_per_request_per_layer),
                  f"mamba cache mode '{L.mamba_cache_mode}'"
                  + (" (prefix caching on)" if L.mamba_cache_mode == "align" else ""))]
    rows.append(("pool groups", f"{L.attention_groups} attn" + (f" + {L.gdn_groups} GDN" if L.gdn else ""),
                 f"{L.group_size_layers} layers each, {L.padding_layers} padding layers; "
                 f"pool block = {fmt_bytes(L.pool_block_bytes)}"))
    return rows


def request_rows(p: MemoryPlan) -> list[Row]:
    r, L = p.request, p.layout
    rows = [("attention blocks", f"{r.attention_layer_blocks:,}",
             f"cdiv({r.tokens}, {L.block_size_tokens}) = {r.attention_blocks_per_layer} x "
             f"{L.num_attention_layers} layers")]
    if L.gdn:
        rows.append(("GDN blocks", f"{r.gdn_layer_blocks:,}",
                     f"{L.gdn_blocks_per_request_per_layer} x {L.num_gdn_layers} layers"))
    rows += [("layer-blocks", f"{r.layer_blocks:,}", f"each {fmt_bytes(L.page_bytes)}"),
             ("attention bytes", fmt_bytes(r.attention_bytes), "")]
    if L.gdn:
        rows.append(("GDN bytes", fmt_bytes(r.gdn_bytes), ""))
    rows += [("pool blocks (vLLM's unit)", f"{r.pool_blocks:,}", f"total {fmt_bytes(r.pool_bytes)}"),
             ("internal fragmentation", f"{r.fragmentation_pct:.2f}%",
              f"{fmt_bytes(r.fragmentation_bytes)}: {r.unused_attention_tokens} unused tokens in the last block"
              + (" + mamba page padding" if L.mamba_padding_bytes else ""))]
    return rows


def budget_rows(p: MemoryPlan) -> list[Row]:
    b = p.budget
    if b is None:
        return []
    c = b.capacity
    rows = [("device total", fmt_bytes(b.total_bytes), b.total_source),
            (f"x gpu_memory_utilization {b.gpu_memory_utilization:g}", fmt_bytes(b.requested_bytes),
             "vLLM's requested memory")]
    rows += [(f"- {i.name}", fmt_bytes(i.bytes), f"({i.source}) {i.note}") for i in b.items]
    rows += [("= KV cache" + (" (upper bound)" if b.kv_is_upper_bound else ""), fmt_bytes(b.kv_cache_bytes),
              f"{c.num_blocks:,} pool blocks"),
             ("GPU KV cache size", f"{c.kv_cache_tokens:,} tokens",
              "int(concurrency x max_model_len), as vLLM logs it"),
             (f"max concurrency at {c.max_model_len:,} tokens", f"{c.max_concurrency:.2f}x",
              f"{c.pool_blocks_per_request} pool blocks per request")]
    return rows


def kv_budget_rows(p: MemoryPlan) -> list[Row]:
    c = p.kv_budget
    if c is None:
        return []
    return [("KV budget", fmt_bytes(c.kv_cache_bytes), f"{c.num_blocks:,} pool blocks"),
            (f"max concurrency at {c.max_model_len:,} tokens", f"{c.max_concurrency:.2f}x",
             f"{c.pool_blocks_per_request} pool blocks per request"),
            ("KV cache size", f"{c.kv_cache_tokens:,} tokens", "")]


def scratch_rows(p: MemoryPlan) -> list[Row]:
    sc = p.scratch
    rows = [("applies", "yes" if sc.applies else "no", sc.reason)]
    if not sc.applies:
        return rows
    rows += [("min_blocks", f"{sc.min_blocks:,}", f"{sc.min_blocks_rule}; capture size "
              f"{p.serving.max_cudagraph_capture_size} ({p.serving.capture_size_source})"),
             ("one tensor", fmt_bytes(sc.tensor_bytes), "page x min_blocks: the size an OOM names"),
             ("scratch", fmt_bytes(sc.scratch_bytes), f"{sc.num_tensors} tensors")]
    if sc.free_bytes is not None:
        rows += [("free at capture", fmt_bytes(sc.free_bytes), sc.free_source),
                 ("verdict", "OOM" if sc.exceeds_free else "fits", "" if not sc.exceeds_free
                  else f"{sc.tensors_before_oom} of {sc.num_tensors} tensors allocate, the next fails")]
    rows += [(f"fix: {f.name}", ("-" if f.scratch_bytes is None else fmt_bytes(f.scratch_bytes))
              + ("" if f.fits else " (still OOM)"), f.detail) for f in sc.fixes]
    return rows


def comparison_rows(p: MemoryPlan) -> list[tuple[str, str, str, str, str]]:
    def show(v: float | None, unit: str) -> str:
        return "-" if v is None else f"{v:,.2f}".rstrip("0").rstrip(".") + f" {unit}"
    return [(c.name, show(c.predicted, c.unit), show(c.logged, c.unit), show(c.difference, c.unit), c.note)
            for c in p.comparisons]


def sections(p: MemoryPlan) -> list[tuple[str, list[Row]]]:
    """Titled row groups, in display order; empty groups are dropped."""
    out = [(f"KV-cache block (vLLM {p.cache.vllm_version}, per GPU, tp={p.cache.tensor_parallel_size})", block_rows(p)),
           (f"One request of {p.request.tokens:,} tokens", request_rows(p)),
           (f"Memory budget on {p.budget.gpu_name} (per GPU)" if p.budget else "", budget_rows(p)),
           ("KV budget (--kv-budget-gib)", kv_budget_rows(p)),
           ("CUDA-graph profiling scratch KV cache", scratch_rows(p))]
    return [(t, rows) for t, rows in out if rows]


def _rich_table(title: str, columns: tuple[str, ...], rows: list) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold")
    for i, col in enumerate(columns):
        number = 0 < i < len(columns) - 1  # values stay whole; the names and the "how" wrap at 80 columns
        t.add_column(col, justify="right" if number else "left", no_wrap=number, overflow="fold",
                     style="dim" if i == len(columns) - 1 else None)
    for row in rows:
        t.add_row(*(Text(cell, style="bold red" if cell == "OOM" else "") for cell in row))
    return t


def render_plan(p: MemoryPlan, console: Console) -> None:
    parts: list = [Text(headline(p), style="bold")]
    parts += [_rich_table(title, ("quantity", "value", "how"), rows) for title, rows in sections(p)]
    if p.facts is not None:
        parts.append(_rich_table(f"vLLM's logged facts ({p.facts.source})",
                                 ("fact", "predicted", "logged", "difference", "note"), comparison_rows(p)))
    if p.layout.predicted_log_lines:
        lines = "\n".join(f"  {ln}" for ln in p.layout.predicted_log_lines)
        parts.append(Text(f"vLLM should log:\n{lines}", style="dim"))
    parts += [Text(f"warning: {w}", style="yellow") for w in p.warnings]
    console.print(Group(*parts))
