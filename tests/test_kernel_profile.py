"""lib/measure/kernel_profile.py: kernel names land in the right category, and a profiled CPU step adds up."""

from __future__ import annotations

import json

import pytest
import torch

from lib.core import kernel_categories
from lib.core.kernel_categories import CATEGORIES, categorise
from lib.measure import kernel_profile
from lib.train.model import GPT, GPTConfig

# Names as torch.profiler reports them on an H100 (cuBLAS, cuBLASLt's nvjet, cuDNN, flash, ATen); most
# were read off a GPT-2 step profiled with PyTorch 2.11+cu130 (long argument lists shortened to '...').
CUDA_NAMES = {
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas": "GEMM",
    "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT": "GEMM",
    # FP8's scale-and-cast prologue, fused by inductor around _scaled_mm: elementwise, not a GEMM
    "triton_poi_fused__scaled_mm__to_copy_add_clamp_clone_gelu_gelu_backward_mul_reciprocal_t_view_7": "norm/elementwise",
    "triton_tem_fused_mm_0": "GEMM",
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn": "GEMM",
    "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, false>(cublasLt::cublasSplitKParams<float>, __nv_bfloat16 const*, float const*, __nv_bfloat16*, float const*, float const*, __nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, void*, long, float*, int*)": "GEMM",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0": "attention",
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, false, true, false, false>(pytorch_flash::Flash_fwd_params)": "attention",
    "fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80, cutlass::bfloat16_t, true, false, true, 64, 64, 64, false>::Params)": "attention",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)": "attention",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)": "cross-entropy",
    "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, float const*, long)": "cross-entropy",
    "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)": "cross-entropy",
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float, bool)#1}> >(int, at::native::gpu_kernel_impl_nocast<...>)": "attention",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, double, double, double, double, double, bool, float const*, float const*>(...)": "optimizer",
    "void at::native::lpnorm_cleanup<float, (at::native::NormType)1, float, float>(float const*, at::native::TensorListAddresses, int)": "optimizer",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)": "norm/elementwise",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, float const*, float const*, float const*, float*, float*, float*)": "norm/elementwise",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, ...)": "norm/elementwise",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, ...)": "norm/elementwise",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(...)": "norm/elementwise",
    "void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>(...)": "norm/elementwise",
    "void at::native::(anonymous namespace)::embedding_backward_feature_kernel<float, float, long>(long const*, float const*, float*, int, long, int, int)": "norm/elementwise",
    "triton_per_fused_native_layer_norm_0": "norm/elementwise",
    "triton_poi_fused_add_gelu_1": "norm/elementwise",
    "triton_red_fused__log_softmax_nll_loss_forward_3": "cross-entropy",
    "void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*, void const*, void*, void*, unsigned int, unsigned int, float, void const*, bool, void const*, void*, void const*, int, int)": "attention",
    "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, unsigned int, float const*, float const*, float const*, float*, void const*, void*, void*, bool, bool)": "attention",
    "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0": "attention",
    "void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>(cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1::Params)": "GEMM",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>(cutlass_80_simt_sgemm_128x256_8x4_nt_align1::Params)": "GEMM",
    "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas": "GEMM",
    "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x256x32_warpgroupsize2x1x1_execute_segment_k_on_kernel__5x_cublas": "GEMM",
    "nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN": "GEMM",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListScalarListMetadata<float, 3>, at::native::(anonymous namespace)::FusedAdamMathFunctor<...> >(...)": "optimizer",
    "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, float, 32u, 32u, 256u, false, true, false>(long, long, float const*, float const*, float const*, float const*, float*, float*)": "norm/elementwise",
    "void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortOnesweepKernel<at_cuda_detail::cub::detail::radix::policy_hub<long, at::cuda::cub::detail::OpaqueType<8>, unsigned long long>::Policy1000, (at_cuda_detail::cub::SortOrder)0, long, at::cuda::cub::detail::OpaqueType<8>, unsigned long long, int, int, at_cuda_detail::cub::detail::identity_decomposer_t>(int*, ...)": "norm/elementwise",
    "void at::native::(anonymous namespace)::krn_partials_per_segment<long>(long*, long const*, long const*, long)": "norm/elementwise",
    "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(int, ...)": "norm/elementwise",
    "Memcpy DtoD (Device -> Device)": "other",
    "Memcpy HtoD (Pageable -> Device)": "other",
    "Memset (Device)": "other",
}

CPU_NAMES = {
    "aten::mm": "GEMM",
    "aten::addmm": "GEMM",
    "aten::bmm": "GEMM",
    "aten::linear": "GEMM",
    "aten::matmul": "GEMM",
    "aten::_softmax": "attention",
    "aten::masked_fill": "attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
    "aten::_log_softmax": "cross-entropy",
    "aten::_log_softmax_backward_data": "cross-entropy",
    "aten::nll_loss_forward": "cross-entropy",
    "aten::cross_entropy_loss": "cross-entropy",
    "aten::native_layer_norm": "norm/elementwise",
    "aten::native_layer_norm_backward": "norm/elementwise",
    "aten::gelu": "norm/elementwise",
    "aten::add_": "norm/elementwise",
    "aten::mul": "norm/elementwise",
    "aten::copy_": "norm/elementwise",
    "aten::embedding_dense_backward": "norm/elementwise",
    "aten::_foreach_mul_": "optimizer",
    "Optimizer.step#AdamW.step": "optimizer",
    "aten::view": "other",
    "aten::t": "other",
}


@pytest.mark.parametrize("name,expected", list(CUDA_NAMES.items()), ids=lambda v: v[:60])
def test_categorise_real_cuda_kernel_names(name, expected):
    assert categorise(name) == expected


@pytest.mark.parametrize("name,expected", list(CPU_NAMES.items()))
def test_categorise_cpu_operator_names(name, expected):
    assert categorise(name) == expected


def test_categorise_ignores_case_and_only_returns_known_categories():
    assert categorise("NVJET_TST_128x256") == "GEMM"
    assert categorise("something_unheard_of") == "other"
    assert {categorise(n) for n in [*CUDA_NAMES, *CPU_NAMES]} <= set(CATEGORIES)


def test_rules_are_data_in_the_documented_order():
    assert [cat for cat, _ in kernel_categories.RULES] == [
        "cross-entropy",
        "optimizer",
        "attention",
        "norm/elementwise",
        "GEMM",
        "norm/elementwise",
    ]


OPS = {  # (kernel name, the aten op that launched it) -> category: the op decides where it names one
    ("Memset (Device)", "aten::_cudnn_attention_forward"): "attention",
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float>(...)", "aten::mm"): "GEMM",
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(...)",
        "aten::nll_loss_backward",
    ): "cross-entropy",
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...>(...)", "aten::_foreach_add_"): "optimizer",
    # an op that names no category leaves the kernel to its own name; no op: the name alone
    ("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN", "aten::view"): "GEMM",
    ("triton_poi_fused_gelu_view_10", None): "norm/elementwise",
    # the CPU path: an op's own name, or the optimizer step it ran inside
    ("aten::lerp_", "Optimizer.step#AdamW.step"): "optimizer",
    ("aten::lerp_", None): "norm/elementwise",
}


@pytest.mark.parametrize("name,op", list(OPS), ids=lambda v: str(v)[:40])
def test_classify_by_the_launching_op_where_it_names_a_category(name, op):
    assert kernel_categories.classify(name, op) == OPS[name, op]


@pytest.fixture(scope="module")
def cpu_profile() -> dict:
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=64, real_vocab_size=64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 64, (2, 16))
    y = torch.randint(0, 64, (2, 16))

    def step():
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return kernel_profile.profile_steps(step, "cpu", steps=2)


def test_profile_of_a_cpu_step_has_every_category_and_adds_up(cpu_profile):
    p = cpu_profile
    json.dumps(p)
    assert p["source"] == "CPU operators, self time (torch.profiler)"
    assert p["steps"] == 2
    assert list(p["categories"]) == list(CATEGORIES)
    assert p["busy_ms"] > 0
    assert sum(p["categories"].values()) == pytest.approx(p["busy_ms"], rel=0.01)
    for cat in ("GEMM", "optimizer", "cross-entropy", "attention", "norm/elementwise"):
        assert p["categories"][cat] > 0, cat


def test_every_kernel_is_recorded_sorted_per_step_with_its_share_of_busy_time(cpu_profile):
    kernels = cpu_profile["kernels"]
    ms = [k["ms"] for k in kernels]
    assert ms == sorted(ms, reverse=True)
    assert sum(ms) == pytest.approx(cpu_profile["busy_ms"])  # every kernel, not only the largest
    assert sum(k["share"] for k in kernels) == pytest.approx(1.0)
    for k in kernels:
        assert k["category"] == kernel_categories.classify(k["name"], k["op"])
        assert k["calls"] > 0
    # aten::mm runs several times per step (every linear, forward and backward): calls are per step
    mm = [k for k in kernels if k["name"] == "aten::mm"]
    assert mm and mm[0]["calls"] >= 2 and mm[0]["calls"] == int(mm[0]["calls"])
    assert not any(k["name"].startswith("ProfilerStep") for k in kernels)


def test_cpu_ops_inside_optimizer_step_count_as_optimizer_now_and_when_reread():
    """The CPU AdamW runs plain elementwise ops; they are optimizer time all the same, and stay so
    when a report classifies the recorded profile again."""
    p = torch.nn.Parameter(torch.randn(256, 256))
    opt = torch.optim.AdamW([p], lr=1e-3, foreach=False)

    def step():
        p.grad = torch.ones_like(p)
        opt.step()

    prof = kernel_profile.profile_steps(step, "cpu", steps=3)
    for now in (prof, kernel_categories.with_current_rules(prof)):
        lerp = [k for k in now["kernels"] if k["name"] in ("aten::addcdiv_", "aten::lerp_")]
        assert lerp and all(k["category"] == "optimizer" and k["op"].startswith("Optimizer.step") for k in lerp)
        assert now["categories"]["optimizer"] > now["categories"]["norm/elementwise"]


def test_summarise_divides_by_steps_and_groups_by_name_and_op():
    rows = [("k1", "aten::mm", 3000.0), ("k1", "aten::mm", 1000.0), ("k2", None, 2000.0), ("k1", "aten::copy_", 500.0)]
    s = kernel_profile.summarise(rows, steps=2, source="x")
    assert s["busy_ms"] == pytest.approx(3.25)
    assert s["categories"]["GEMM"] == pytest.approx(2.0) and s["categories"]["norm/elementwise"] == pytest.approx(0.25)
    assert s["kernels"][0] == {
        "name": "k1",
        "op": "aten::mm",
        "category": "GEMM",
        "ms": pytest.approx(2.0),
        "calls": 1.0,
        "share": pytest.approx(2 / 3.25),
    }
    assert [(k["name"], k["op"]) for k in s["kernels"][1:]] == [("k2", None), ("k1", "aten::copy_")]
    assert s["kernels"][1]["calls"] == 0.5 and s["kernels"][1]["category"] == "other"


STALE = "triton_poi_fused__scaled_mm__to_copy_clamp_7"  # once counted as a GEMM, elementwise by today's rules


def test_a_recorded_profile_is_reread_with_the_current_rules():
    """Every stored kernel is classified again; the stored categories are not trusted."""
    recorded = {
        "busy_ms": 10.0,
        "categories": {**{c: 0.0 for c in CATEGORIES}, "GEMM": 10.0},
        "kernels": [
            {
                "name": "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT",
                "op": "aten::mm",
                "category": "GEMM",
                "ms": 5.0,
                "calls": 1.0,
                "share": 0.5,
            },
            {"name": STALE, "op": None, "category": "GEMM", "ms": 3.0, "calls": 1.0, "share": 0.3},
            {
                "name": "Memset (Device)",
                "op": "aten::_cudnn_attention_forward",
                "category": "GEMM",
                "ms": 2.0,
                "calls": 1.0,
                "share": 0.2,
            },
        ],
    }
    now = kernel_categories.with_current_rules(recorded)
    assert {c: v for c, v in now["categories"].items() if v} == {"GEMM": 5.0, "norm/elementwise": 3.0, "attention": 2.0}
    assert [k["category"] for k in now["kernels"]] == ["GEMM", "norm/elementwise", "attention"]
    assert sum(kernel_categories.shares(now).values()) == pytest.approx(1.0)
    assert now["recorded_rules_ms"] == 0.0
    assert recorded["categories"]["GEMM"] == 10.0 and recorded["kernels"][1]["category"] == "GEMM"  # not modified


def test_an_older_record_with_only_its_top_kernels_is_reread_as_far_as_it_goes():
    recorded = {
        "busy_ms": 10.0,
        "categories": {**{c: 0.0 for c in CATEGORIES}, "GEMM": 8.0, "norm/elementwise": 2.0},
        "top": [
            {"name": STALE, "category": "GEMM", "ms": 3.0},
            {"name": "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT", "category": "GEMM", "ms": 5.0},
        ],
    }
    now = kernel_categories.with_current_rules(recorded)
    assert now["categories"]["GEMM"] == pytest.approx(5.0)
    assert now["categories"]["norm/elementwise"] == pytest.approx(5.0)
    assert [k["name"] for k in now["kernels"]] == [recorded["top"][1]["name"], STALE]  # largest first
    assert [k["category"] for k in now["kernels"]] == ["GEMM", "norm/elementwise"]
    assert now["recorded_rules_ms"] == pytest.approx(2.0)  # the time outside the top list keeps its category
    assert now["busy_ms"] == pytest.approx(10.0) and "top" not in now


@pytest.mark.parametrize(
    "fractions",
    [
        {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3},
        {"a": 0.745, "b": 0.125, "c": 0.13},
        {"a": 0.996, "b": 0.002, "c": 0.002},
        {"a": 1.0, "b": 0.0},
    ],
)
def test_whole_percentages_of_shares_sum_to_100(fractions):
    out = kernel_categories.percents(fractions)
    assert sum(out.values()) == 100
    assert all(abs(out[k] - fractions[k] * 100) < 1 for k in fractions)
