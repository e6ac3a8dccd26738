"""Kernel classifier: the rules file, its examples, user overrides, bad files, and real names -> buckets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from phaseprof.classify import classifier
from phaseprof.classify.buckets import Bucket
from phaseprof.analysis.items import op_modules
from phaseprof.classify.classifier import classify_kernels, first_match, kernel_bucket, module_bucket_of_op
from phaseprof.classify.rules import RuleSet, load_rules
from phaseprof.errors import PhaseprofError

RULES = load_rules()
B = Bucket


def explain(name: str, rules: RuleSet) -> str:
    """Which rule gives ``name`` its bucket in each view (assertion messages)."""
    hits = {view: first_match(name, ordered) for view, ordered in (("kernel", rules.kernel), ("module", rules.module))}
    return f"{name}: " + "; ".join(f"{v} view: {h[1].bucket} <- {h[1].origin}" if h else f"{v} view: no rule"
                                   for v, h in hits.items())


# --- the rules file checks itself: every example lands in its own rule's bucket ---------------------

KERNEL_EXAMPLES = [(i, r.bucket, ex) for i, r in enumerate(RULES.kernel) for ex in r.examples]
MODULE_EXAMPLES = [(i, r.bucket, ex) for i, r in enumerate(RULES.module) for ex in r.examples]


@pytest.mark.parametrize(("index", "bucket", "example"), KERNEL_EXAMPLES, ids=lambda v: str(v)[:50])
def test_kernel_example_matches_its_rule_and_is_not_shadowed(index, bucket, example):
    assert RULES.kernel[index].match(example)
    assert kernel_bucket(example, RULES) == bucket, explain(example, RULES)


@pytest.mark.parametrize(("index", "bucket", "example"), MODULE_EXAMPLES, ids=lambda v: str(v)[:50])
def test_module_example_matches_its_rule_and_is_not_shadowed(index, bucket, example):
    assert RULES.module[index].match(example)
    assert module_bucket_of_op(example, RULES) == bucket, explain(example, RULES)


def test_every_rule_has_examples_and_a_why():
    for rule in RULES.kernel + RULES.module:
        assert rule.examples, rule.origin
        assert rule.why, rule.origin


def test_every_bucket_but_unknown_is_reachable_through_real_examples():
    reached = {kernel_bucket(ex, RULES) for _, _, ex in KERNEL_EXAMPLES}
    # mlp is module-view only: the dense MLP's module class (rules/layers.toml), no kernel is named one
    assert reached == set(Bucket) - {B.UNKNOWN, B.MLP}


def test_module_view_names_the_model_components():
    reached = {module_bucket_of_op(ex, RULES) for _, _, ex in MODULE_EXAMPLES}
    assert reached == {B.MOE, B.GDN, B.ATTENTION, B.NORM, B.COMMUNICATION, B.SAMPLING}


# --- real names -> expected bucket (kernel view) ------------------------------------------------------

KERNEL_TABLE = [
    # NVIDIA, vLLM Llama-70B TP4 on H100 (traceMap)
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", B.GEMM),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", B.COMMUNICATION),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_2", B.NORM),
    ("triton_poi_fused_mul_silu_1", B.ELEMENTWISE),
    ("triton_poi_fused_add_all_reduce_bitwise_and_bitwise_or_embedding_ge_lt_masked_fill_mul_sub_0", B.ELEMENTWISE),
    ("Memset (Device)", B.MEMORY),
    # NVIDIA, vLLM gpt-oss-120b MXFP4 on B200 (TraceLens)
    ("bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_schedP2x1x2x3_biasM_bN_tmaOpt_clmp_dynBatch_sm100f", B.MOE),
    ("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext", B.ATTENTION),
    ("nvjet_tst_144x128_64x6_2x1_v_bz_bias_TNN", B.GEMM),
    ("_copy_page_indices_kernel", B.OTHER),
    ("Memcpy DtoD (Device -> Device)", B.MEMORY),
    # AMD MI300X: vLLM Llama TP4, vLLM gpt-oss-20b, SGLang Qwen3-8B (traceMap, TraceLens)
    ("Cijk_SB_BiasS_HAS_ScaleAlphaVec_PostGSU4_VW4", B.GEMM),
    ("ncclDevKernel_Generic_2(ncclDevKernelArgsStorage<4096ul>)", B.COMMUNICATION),
    ("_matmul_ogs_NNT_bf16xbf16xmxfp4_128x128x128x1_swiglu", B.MOE),
    ("_topk_forward", B.MOE),
    ("kernel_unified_attention_3d", B.ATTENTION),
    ("_fwd_kernel", B.ATTENTION),  # vLLM prefix_prefill.py context_attention_fwd (seen under unified_attention)
    ("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb1ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib", B.NORM),
    ("create_flashinfer_kv_indices_triton", B.OTHER),
    ("Memcpy HtoD (Host -> Device)", B.MEMORY),
    # PyTorch kernels from a torch 2.11 profile on H200
    ("nvjet_sm90_tst_64x32_64x16_1x2_h_bz_TNT", B.GEMM),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, false>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)", B.NORM),
    ("void at::native::radixSortKVInPlace<2, -1, 32, 4, float, long, unsigned int>(at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int, unsigned int, unsigned int, at::cuda::detail::TensorInfo<long, unsigned int>, unsigned int, bool)", B.ELEMENTWISE),
    # Training traces (HTA, kineto sample, DeepSeek): not the target, but they should not be nonsense
    ("volta_sgemm_64x64_nt", B.GEMM),
    ("void cudnn::bn_bw_1C11_singleread<float, 512, true, 1, 2, 0>(cudnn::bn_bw_1C11_args<float>)", B.NORM),
    ("void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*, bool const*, int4 const*, float const*, int4 const*, int4 const*, int const*, int const*, dpsk::ep::internode::SourceMeta const*, int const*, int const*, int const*, int, int, int, int, void*, int, int, void**, int, int, int, int, int*)", B.COMMUNICATION),
    ("triton__0d1d2d3d4d5d", B.UNKNOWN),  # old inductor names say nothing about what they compute
    # long real names, spelled out at the bottom of this file
    ("FA3_DECODE", B.ATTENTION),
    ("EXPONENTIAL", B.SAMPLING),  # q.exponential_() in vLLM's random sampler
    ("CIJK", B.GEMM),
    ("LL4MI", B.ATTENTION),
    ("CK_FMHA", B.ATTENTION),
    # CPU op names (kernel view on CPU-only traces): vLLM CPU ops and ATen
    ("_C::onednn_mm", B.GEMM),
    ("aten::addmm", B.GEMM),
    ("_C::cpu_fused_moe", B.MOE),
    ("_C::chunk_gated_delta_rule_cpu", B.GDN),
    ("_C::cpu_attention_with_kv_cache", B.ATTENTION),
    ("_C::rms_norm", B.NORM),
    ("_C::silu_and_mul", B.ELEMENTWISE),
    ("_C::shm_allreduce", B.COMMUNICATION),
    ("aten::argmax", B.SAMPLING),
    ("aten::copy_", B.ELEMENTWISE),
    ("some_kernel_nobody_has_seen", B.UNKNOWN),
]


@pytest.mark.parametrize(("name", "expected"), KERNEL_TABLE, ids=lambda v: str(v)[:40])
def test_real_kernel_names(name, expected):
    name = LONG_NAMES.get(name, name)
    assert kernel_bucket(name, RULES) == expected, explain(name, RULES)


# --- module view: op names -> component; innermost named op wins ---------------------------------------

MODULE_TABLE = [
    ("vllm::moe_forward", B.MOE),
    ("vllm::moe_forward_shared", B.MOE),
    ("vllm::qwen_gdn_attention_core", B.GDN),
    ("vllm::unified_attention_with_output", B.ATTENTION),
    ("_C::fused_add_rms_norm", B.NORM),
    ("vllm::all_reduce", B.COMMUNICATION),
    ("nn.Module: Sampler_0", B.SAMPLING),
    ("vllm/v1/sample/sampler.py(82): greedy_sample", B.SAMPLING),
    # the whole block, projections included: the module view says which component a kernel ran for
    ("nn.Module: OAIAttention_0", B.ATTENTION),
    ("nn.Module: QwenGatedDeltaNetAttention_0", B.GDN),  # GDN's block is named ...Attention: gdn rule first
    ("nn.Module: RMSNormGated_0", B.GDN),  # GDN's gated output norm, as in the kernel view
    ("nn.Module: GemmaRMSNorm_3", B.NORM),
    ("nn.Module: Qwen3NextSparseMoeBlock_0", B.MOE),
    ("nn.Module: QKVParallelLinear_0", None),  # a linear layer: its enclosing block decides
    ("nn.Module: GraphModule_0", None),
    ("aten::mm", None),
    ("## Call CompiledFxGraph fud64jsrxcxliekg7lptyw24yz5k3oa65b73wjfbhz6j2fg6ouu7 ##", None),
]


@pytest.mark.parametrize(("op", "expected"), MODULE_TABLE)
def test_module_bucket_of_op(op, expected):
    assert module_bucket_of_op(op, RULES) == expected


def test_innermost_named_op_wins_and_unnamed_stacks_fall_back():
    """``analysis.items.op_modules``, on the B200 gpt-oss stack: the expert-output all-reduce runs inside
    vllm::moe_forward; an op stack no module rule names has no module (its kernels keep their kernel view)."""
    names = ["nn.Module: MLPBlock_0", "vllm::moe_forward", "vllm::all_reduce", "symm_mem::multimem_all_reduce_",
             "aten::mm", "aten::linear", "aten::mm"]
    ops = pd.DataFrame({"name": pd.Categorical(names), "ts_ns": [0, 1, 2, 3, 10, 100, 101],
                        "end_ns": [50, 40, 30, 20, 15, 150, 140]})
    parent = np.array([-1, 0, 1, 2, 1, -1, 5])  # 0 > 1 > 2 > 3 and 1 > 4; 5 > 6 alone
    got = list(op_modules(ops, parent, RULES))
    assert got[1:] == [B.MOE, B.COMMUNICATION, B.COMMUNICATION, B.MOE, None, None]
    assert got[0] == module_bucket_of_op(names[0], RULES)


# --- the vectorised API ---------------------------------------------------------------------------------

def test_classify_kernels_maps_rows_and_missing_names():
    names = pd.Series(["nvjet_tst_192x8_64x8_4x1_v_bz_TNT", None, "_topk_forward", "nvjet_tst_192x8_64x8_4x1_v_bz_TNT", np.nan])
    got = classify_kernels(names, RULES)
    assert got.dtype == object
    assert list(got) == [B.GEMM, B.UNKNOWN, B.MOE, B.GEMM, B.UNKNOWN]
    assert list(classify_kernels(["Memset (Device)"], RULES)) == [B.MEMORY]
    assert classify_kernels([], RULES).shape == (0,)


def test_classify_kernels_looks_each_unique_name_up_once(monkeypatch):
    rules = load_rules()  # fresh memo
    calls, searched, by_set = [], [], []
    real = classifier.first_match
    monkeypatch.setattr(classifier, "first_match", lambda name, ordered: calls.append(name) or real(name, ordered))
    real_may = type(rules).may_match
    monkeypatch.setattr(type(rules), "may_match", lambda self, name, view: searched.append(name) or
                        real_may(self, name, view))
    real_set = type(rules).first_by_set
    monkeypatch.setattr(type(rules), "first_by_set", lambda self, name, view: by_set.append(name) or
                        real_set(self, name, view))
    got = classify_kernels(pd.Series(["a_kernel", "fused_moe_kernel", "a_kernel"] * 1000), rules)
    assert sorted(by_set) == ["a_kernel", "fused_moe_kernel"]  # each distinct name once, by the RE2 set ...
    assert searched == ["a_kernel"]  # ... the alternation only where the set found nothing ...
    assert calls == []  # ... and rule by rule only where that finds a pattern the set did not
    assert (got == np.array([B.UNKNOWN, B.MOE, B.UNKNOWN] * 1000, dtype=object)).all()


def test_first_by_set_is_first_match(tmp_path: Path):
    """``RuleSet.first_by_set`` (one RE2 set pass) picks ``first_match``'s rule, or None where no pattern is found:
    every kernel and op name of the committed traces and some made up, with the default rules and with a user
    file of overlapping rules and inline flags before them."""
    user = write(tmp_path, '''
[[kernel]]
bucket = "gemm"
patterns = ["(?i)NVJET", "^void at::native::"]
[[kernel]]
bucket = "moe"
patterns = ["kernel$", "x*"]
[[module]]
bucket = "attention"
patterns = ["(?i)aten::(mm|ADD)"]
''')
    names = {"", "a_kernel", "fused_moe_kernel", "NVJET_x", "Memset (Device)", "\u00e9t\u00e9 kernel"}
    for path in sorted((Path(__file__).resolve().parents[2] / "traces").rglob("*.json.gz"))[:12]:
        from phaseprof.trace.read import load_tables
        t = load_tables(path)
        for frame in (t.gpu, t.ops):
            names.update(str(n) for n in frame["name"].cat.categories)
    for rules in (load_rules(), load_rules([user])):
        for view, ordered in (("kernel", rules.kernel), ("module", rules.module)):
            for name in sorted(names):
                want = first_match(name, ordered)
                got = rules.first_by_set(name, view)
                assert got is (want[1] if want else None), (view, name)


# --- user rule files ------------------------------------------------------------------------------------

def write(tmp_path: Path, text: str, name: str = "mine.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_user_rules_come_first_and_override_the_default(tmp_path):
    mine = write(tmp_path, """
[[kernel]]
bucket = "other"
patterns = ['^nvjet_tst_192x8']
why = "our lm_head GEMM, tracked on its own"
examples = ["nvjet_tst_192x8_64x8_4x1_v_bz_TNT"]

[[module]]
bucket = "attention"
patterns = ['^nn\\.Module: OAIAttention_\\d+$']
""")
    rules = load_rules([mine])
    assert kernel_bucket("nvjet_tst_192x8_64x8_4x1_v_bz_TNT", rules) == B.OTHER
    assert kernel_bucket("nvjet_tst_144x128_64x6_2x1_v_bz_bias_TNN", rules) == B.GEMM  # default still applies
    assert module_bucket_of_op("nn.Module: OAIAttention_3", rules) == B.ATTENTION
    assert rules.kernel[1:] == RULES.kernel and rules.module[1:] == RULES.module
    assert first_match("nvjet_tst_192x8_64x8_4x1_v_bz_TNT", rules.kernel)[1].origin == "mine.toml [[kernel]] #1"


def test_two_user_files_keep_their_order(tmp_path):
    first = write(tmp_path, "[[kernel]]\nbucket = 'norm'\npatterns = ['^x']\n", "a.toml")
    second = write(tmp_path, "[[kernel]]\nbucket = 'gemm'\npatterns = ['^x']\n", "b.toml")
    assert kernel_bucket("x_kernel", load_rules([first, second])) == B.NORM
    assert kernel_bucket("x_kernel", load_rules([second, first])) == B.GEMM


BAD_FILES = [
    ("[[kernel]]\nbucket = 'matmul'\npatterns = ['x']\n", "[[kernel]] #1: unknown bucket 'matmul'"),
    ("[[kernel]]\nbucket = 'gemm'\npatterns = ['fused_moe(']\n", "[[kernel]] #1: bad regex 'fused_moe('"),
    ("[[module]]\npatterns = ['x']\n", "[[module]] #1: missing key 'bucket'"),
    ("[[kernel]]\nbucket = 'gemm'\n", "[[kernel]] #1: missing key 'patterns'"),
    ("[[kernel]]\nbucket = 'gemm'\npattern = ['x']\n", "missing key 'patterns'"),
    ("[[kernel]]\nbucket = 'gemm'\npatterns = ['x']\nwhy = 'ok'\nexample = ['x']\n", "unknown key 'example'"),
    ("[[kernel]]\nbucket = 'gemm'\npatterns = 'nvjet'\n", "'patterns' must be a list of strings"),
    ("[[kernel]]\nbucket = 'gemm'\npatterns = []\n", "'patterns' is empty"),
    ("[[kernel]]\nbucket = 'gemm'\npatterns = ['^nvjet']\nexamples = ['cutlass_gemm']\n", "example 'cutlass_gemm' matches none"),
    ("[[kernal]]\nbucket = 'gemm'\npatterns = ['x']\n", "unknown section 'kernal'"),
    ("kernel = 'gemm'\n", "'kernel' must be an array of tables"),
    ("[[kernel]\nbucket = 'gemm'\n", "not valid TOML"),
]


@pytest.mark.parametrize(("text", "problem"), BAD_FILES, ids=[p for _, p in BAD_FILES])
def test_bad_rule_files_name_the_file_and_the_problem(tmp_path, text, problem):
    bad = write(tmp_path, text, "bad.toml")
    with pytest.raises(PhaseprofError) as err:
        load_rules([bad])
    message = str(err.value)
    assert problem in message
    assert message.startswith(str(bad.resolve())) and err.value.path == str(bad.resolve())
    assert "\n" not in message


def test_missing_rule_file(tmp_path):
    with pytest.raises(PhaseprofError, match="rules file not found") as err:
        load_rules([tmp_path / "nope.toml"])
    assert err.value.path == str(tmp_path / "nope.toml")


# --- long real names used in KERNEL_TABLE -------------------------------------------------------------

LONG_NAMES = {
    # vLLM FA3 decode on H100 (traceMap)
    "FA3_DECODE": (
        "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMai"
        "nloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<64>, cute::C<1"
        "28>, cute::C<128> >, 128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false, false, true,"
        " true, false, false, true, true, true, true, false>, flash::CollectiveEpilogueFwd<cute::tuple<cute::"
        "C<64>, cute::C<128>, cute::C<128> >, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::bflo"
        "at16_t, cutlass::arch::Sm90, 128, true, true, true, false>, flash::VarlenDynamicPersistentTileSchedu"
        "ler<64, 128, 128, true, true, true> > > >(flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash:"
        ":CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<"
        "64>, cute::C<128>, cute::C<128> >, 128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false"
        ", false, true, true, false, false, true, true, true, true, false>, flash::CollectiveEpilogueFwd<cute"
        "::tuple<cute::C<64>, cute::C<128>, cute::C<128> >, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >,"
        " cutlass::bfloat16_t, cutlass::arch::Sm90, 128, true, true, true, false>, flash::VarlenDynamicPersis"
        "tentTileScheduler<64, 128, 128, true, true, true> > >::Params)"
    ),
    # torch 2.11 on H200: Tensor.exponential_(), which vLLM's random sampler uses for its exponential race
    "EXPONENTIAL": (
        "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, at::na"
        "tive::templates::cuda::uniform_and_transform<float, float, at::CUDAGeneratorImpl*, at::native::templ"
        "ates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, double, at::CUDAGene"
        "ratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}>("
        "at::TensorIteratorBase&, at::CUDAGeneratorImpl*, at::native::templates::cuda::exponential_kernel<at:"
        ":CUDAGeneratorImpl*>(at::TensorIteratorBase&, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operato"
        "r()() const::{lambda()#2}::operator()() const::{lambda(float)#1})::{lambda(curandStatePhilox4_32_10*"
        ")#2}, at::native::(anonymous namespace)::distribution_nullary_kernel<float, float, float4, at::CUDAG"
        "eneratorImpl*, at::native::templates::cuda::uniform_and_transform<float, float, at::CUDAGeneratorImp"
        "l*, at::native::templates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&,"
        " double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const"
        "::{lambda(float)#1}>(at::TensorIteratorBase&, at::CUDAGeneratorImpl*, at::native::templates::cuda::e"
        "xponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, double, at::CUDAGeneratorImpl*)::"
        "{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1})::{lambda(cura"
        "ndStatePhilox4_32_10*)#2}, at::native::templates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(a"
        "t::TensorIteratorBase&, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()"
        "#2}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::CUDAGeneratorImpl*, at::nat"
        "ive::templates::cuda::uniform_and_transform<float, float, at::CUDAGeneratorImpl*, at::native::templa"
        "tes::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, double, at::CUDAGener"
        "atorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}>(a"
        "t::TensorIteratorBase&, at::CUDAGeneratorImpl*, at::native::templates::cuda::exponential_kernel<at::"
        "CUDAGeneratorImpl*>(at::TensorIteratorBase&, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator"
        "()() const::{lambda()#2}::operator()() const::{lambda(float)#1})::{lambda(curandStatePhilox4_32_10*)"
        "#2} const&, at::native::templates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIterat"
        "orBase&, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()"
        "() const::{lambda(float)#1})::{lambda(int, float)#1}>(long, at::PhiloxCudaState, at::native::templat"
        "es::cuda::uniform_and_transform<float, float, at::CUDAGeneratorImpl*, at::native::templates::cuda::e"
        "xponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, double, at::CUDAGeneratorImpl*)::"
        "{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}>(at::TensorIte"
        "ratorBase&, at::CUDAGeneratorImpl*, at::native::templates::cuda::exponential_kernel<at::CUDAGenerato"
        "rImpl*>(at::TensorIteratorBase&, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::"
        "{lambda()#2}::operator()() const::{lambda(float)#1})::{lambda(curandStatePhilox4_32_10*)#2}, at::nat"
        "ive::(anonymous namespace)::distribution_nullary_kernel<float, float, float4, at::CUDAGeneratorImpl*"
        ", at::native::templates::cuda::uniform_and_transform<float, float, at::CUDAGeneratorImpl*, at::nativ"
        "e::templates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, double, at::"
        "CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(flo"
        "at)#1}>(at::TensorIteratorBase&, at::CUDAGeneratorImpl*, at::native::templates::cuda::exponential_ke"
        "rnel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, double, at::CUDAGeneratorImpl*)::{lambda()#1}:"
        ":operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1})::{lambda(curandStatePhilox"
        "4_32_10*)#2}, at::native::templates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIter"
        "atorBase&, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator"
        "()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::CUDAGeneratorImpl*, at::native::template"
        "s::cuda::uniform_and_transform<float, float, at::CUDAGeneratorImpl*, at::native::templates::cuda::ex"
        "ponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, double, at::CUDAGeneratorImpl*)::{"
        "lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}>(at::TensorIter"
        "atorBase&, at::CUDAGeneratorImpl*, at::native::templates::cuda::exponential_kernel<at::CUDAGenerator"
        "Impl*>(at::TensorIteratorBase&, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{"
        "lambda()#2}::operator()() const::{lambda(float)#1})::{lambda(curandStatePhilox4_32_10*)#2} const&, a"
        "t::native::templates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, doub"
        "le, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{la"
        "mbda(float)#1})::{lambda(int, float)#1})"
    ),
    # hipBLASLt GEMM, vLLM Llama TP4 on MI300X (traceMap)
    "CIJK": (
        "Cijk_Alik_Bljk_BBS_BH_Bias_HAS_SAV_UserArgs_MT192x16x128_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_C"
        "LR1_CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_GLS0_ISA942_IU1_K1_LBSPPA256_LBSPPB256_L"
        "BSPPM0_LPA16_LPB16_LPM0_LRVW8_LWPMn1_MIAV0_MIWT3_1_MO40_NTn1_NTA4_NTB0_NTC0_NTD0_NTM0_NEPBS16_NLCA1_"
        "NLCB1_ONLL1_PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW1_SK0_SKXCCM0_TLDS1_ULSGRO0_USL1_UIOFGRO0_USF"
        "GROn1_VSn1_VWA1_VWB1_WSGRA0_WSGRB0_WS64_WG64_4_1"
    ),
    # vLLM ROCm paged attention, MI300X (traceMap)
    "LL4MI": (
        "void paged_attention_ll4mi_QKV_mfma16_kernel<__hip_bfloat16, __hip_bfloat16, (vllm::Fp8KVCacheDataTy"
        "pe)0, __hip_bfloat16, 16, 128, 256, false, 8>(__hip_bfloat16 const*, __hip_bfloat16 const*, __hip_bf"
        "loat16 const*, int, float, int const*, int const*, int const*, int, float const*, int, int, int, flo"
        "at*, float*, __hip_bfloat16*, __hip_bfloat16*, int, float const*, float const*, float const*)"
    ),
    # aiter/CK batch-prefill attention, SGLang on MI300X (TraceLens)
    "CK_FMHA": (
        "_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernelINS_40BlockFmhaBatchPrefillPipelin"
        "eQRKSVSAsyncINS_36BlockFmhaBatchPrefillPipelineProblemIDF16bDF16bDF16bffDF16bhfDF16bfDF16bNS_13TileF"
        "mhaShapeINS_8sequenceIJLi128ELi128ELi32ELi128ELi32ELi128EEEENS5_IJLi4ELi1ELi1EEEENS5_IJLi32ELi32ELi1"
        "6EEEES7_S8_Lb1EEELb1ENS_17ComposedAttentionILj0ELb1EEENS_30SimplifiedGenericAttentionMaskILb1EEELb0E"
        "Li1ENS_26TileFmhaBatchPrefillTraitsILb1ELb1ELb1ELb1ELb0ELNS_22BlockAttentionBiasEnumE0ELb0ELb0ELb0EL"
        "NS_28BlockAttentionQuantScaleEnumE0ELin1ELb0ELb0ELi1ELNS_37BlockAttentionKVCacheMemoryLayoutEnumE1EL"
        "NS_36BlockAttentionKVCacheLookupTableEnumE1ELNS_33BlockAttentionKVCacheLoadModeEnumE0EEEEENS_53Block"
        "FmhaBatchPrefillPipelineQRKSVSAsyncDefaultPolicyEEENS_17Default2DEpilogueINS_24Default2DEpilogueProb"
        "lemIfDF16bLb1ELb1ELb1EEEvEEEEJNSS_21FmhaFwdGroupModeKargsEEEEvDpT1_"
    ),
}


def test_one_search_per_rule_matches_as_pattern_by_pattern():
    """Rule.match (all patterns as one RE2 alternation) and RuleSet.may_match agree with trying each pattern,
    on every name of the committed traces and every rule example; inline flags keep their scope; an
    alternation that does not compile (``\\Q`` quoting to the end) falls back to pattern by pattern."""
    import re2

    from phaseprof.classify.rules import Rule, RuleSet, _RE2_OPTIONS
    from phaseprof.trace.read import load_tables

    rules = load_rules()
    names = {e for r in rules.kernel + rules.module for e in r.examples}
    for path in sorted((Path(__file__).resolve().parents[2] / "traces").rglob("*.json.gz"))[:12]:
        t = load_tables(path)
        for f in (t.gpu, t.ops, t.runtime, t.modules):
            if not f.empty:
                names |= {str(n) for n in f["name"].cat.categories}
    for view, ordered in (("kernel", rules.kernel), ("module", rules.module)):
        for name in names:
            each = [r.matching_pattern(name) is not None for r in ordered]
            assert [r.match(name) for r in ordered] == each, name
            assert rules.may_match(name, view) == any(each), name
    odd = Rule(B.MOE, tuple(re2.compile(p, _RE2_OPTIONS) for p in ("(?i)moe", "GEMM", r"\Qa(b")))
    assert odd.match("xMoE") and odd.match("GEMM") and not odd.match("gemm") and odd.match("za(b")
    assert odd._any == [None]  # \Q...: not compilable as one; matched pattern by pattern
    flags = Rule(B.MOE, tuple(re2.compile(p, _RE2_OPTIONS) for p in ("(?i)moe", "GEMM")))
    assert flags.match("MOE") and not flags.match("gemm") and flags._any[0] is not None
    assert not RuleSet(kernel=(), module=()).may_match("x", "kernel")
