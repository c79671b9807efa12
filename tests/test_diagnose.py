import dataclasses

import pytest

from tuner.analysis.diagnose import (
    DEFAULT_THRESHOLDS,
    LaunchFacts,
    Thresholds,
    diagnose,
    kernel_facts,
    occupancy,
)
from tuner.analysis.explain import diagnose_report, from_launch_stats, inferred_sm_count
from tuner.analysis.kernel_names import kernel_short_name
from tuner.analysis.ncu import LaunchStats, NcuLaunch, NcuReportError
from tuner.analysis.ncu_text import parse_text_report

from conftest import H100_CSV, H100_CUTLASS, RTX3060_CUTLASS, RTX3060_NAIVE  # noqa: E402

# conv_1: N=1, H=W=32, C=K=32, 3x3, pad 1 -> implicit GEMM M = 1*32*32, N = 32, K = 32*3*3.
CONV_1_GEMM = (1024, 32, 288)
TILE_128x128x64 = (128, 128, 64)

# A launch no rule flags: exactly one full wave of 4 blocks per SM on 10 SMs, 8 warps each (50 % occupancy).
CLEAN = LaunchFacts(
    grid_blocks=40,
    threads_per_block=256,
    registers_per_thread=64,
    smem_per_block_bytes=0,
    sm_count=10,
    max_active_blocks_per_sm=4,
)


def facts(**changes) -> LaunchFacts:
    return dataclasses.replace(CLEAN, **changes)


def codes(launch_facts: LaunchFacts, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> list[str]:
    return [flag.code for flag in diagnose(launch_facts, thresholds)]


def flag(launch_facts: LaunchFacts, code: str):
    (found,) = [f for f in diagnose(launch_facts) if f.code == code]
    return found


def test_clean_launch_has_no_flags():
    assert diagnose(CLEAN) == []


def test_thresholds_live_in_one_frozen_default():
    assert DEFAULT_THRESHOLDS == Thresholds()
    assert (DEFAULT_THRESHOLDS.min_wave_efficiency, DEFAULT_THRESHOLDS.max_padding_fraction) == (0.8, 0.10)
    assert DEFAULT_THRESHOLDS.min_occupancy_pct == 25.0
    assert (DEFAULT_THRESHOLDS.split_k_max_tile_fill, DEFAULT_THRESHOLDS.split_k_min_k_iterations) == (0.5, 8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_THRESHOLDS.min_occupancy_pct = 10.0


# --- the real reports ----------------------------------------------------------------------------


def test_rtx3060_report_with_28_sms():
    ((group, occ, flags),) = diagnose_report(RTX3060_CUTLASS, sms=28)
    assert group.count == 21
    assert group.stats.registers_per_thread == 254
    assert group.stats.sm_count is None  # the report does not state the SM count: --sms supplies it
    assert occ.blocks_per_sm == 1
    assert occ.limited_by == ("shared memory",)
    assert occ.max_warps_per_sm == 48  # sm_86
    assert occ.theoretical_pct == pytest.approx(8.33, abs=0.01)
    assert [f.code for f in flags] == ["small_grid", "occupancy_limit"]
    small_grid, occupancy_limit = flags
    assert small_grid.message == "8 blocks on 28 SMs: 20 SMs idle (0.29 waves)"
    assert small_grid.value == pytest.approx(8 / 28)
    assert occupancy_limit.value == pytest.approx(8.33, abs=0.01)
    assert "8.33 %" in occupancy_limit.message and "limited by shared memory" in occupancy_limit.message


def test_rtx3060_report_without_sm_count_infers_it_from_grid_and_waves():
    """The report gives grid 8, 0.29 waves and a block limit of 1 per SM, not the SM count: 8 / 0.29 = 28
    SMs, and the headline waste (8 blocks on a 28-SM part) is named without --sms."""
    ((_, occ, flags),) = diagnose_report(RTX3060_CUTLASS, sms=None)
    assert [f.code for f in flags] == ["sm_count_inferred", "small_grid", "occupancy_limit"]
    assert flags[0].message == "28 SMs, inferred from grid 8 / (0.29 waves x 1 block per SM) (--sms sets it)"
    assert flags[1].message.startswith("8 blocks on 28 SMs: 20 SMs idle")
    assert occ.blocks_per_sm == 1


def test_too_few_waves_to_infer_the_sm_count_leave_it_unknown():
    ((group, _, _),) = diagnose_report(H100_CUTLASS, sms=None)
    stats = dataclasses.replace(group.stats, sm_count=None)
    assert stats.waves_per_sm == 0.03 and inferred_sm_count(stats) is None  # 114 to 160 SMs would print 0.03
    facts = from_launch_stats(stats)
    assert facts.sm_count is None and facts.sm_count_inferred_from is None


def test_h100_report_takes_the_sm_count_from_the_report():
    ((group, occ, flags),) = diagnose_report(H100_CUTLASS, sms=None)
    assert (group.count, group.grid, group.block) == (2, (8, 1, 1), (128, 1, 1))
    assert group.stats.registers_per_thread == 254
    assert occ.blocks_per_sm == 2
    assert occ.limited_by == ("registers", "shared memory")
    assert occ.theoretical_pct == 12.5
    assert [f.code for f in flags] == ["small_grid", "occupancy_limit"]
    assert flags[0].message == "8 blocks on 132 SMs: 124 SMs idle (0.03 waves)"
    assert "limited by registers and shared memory" in flags[1].message


def test_sms_argument_overrides_the_report():
    ((_, _, flags),) = diagnose_report(H100_CUTLASS, sms=66)
    assert flags[0].message == "8 blocks on 66 SMs: 58 SMs idle (0.06 waves)"


def test_csv_report_diagnoses_like_the_text_report():
    from_csv = [(group.count, occ, flags) for group, occ, flags in diagnose_report(H100_CSV, sms=None)]
    from_text = [(group.count, occ, flags) for group, occ, flags in diagnose_report(H100_CUTLASS, sms=None)]
    assert from_csv == from_text


def test_naive_report_kernels_are_not_flagged():
    results = diagnose_report(RTX3060_NAIVE, sms=None)
    assert len(results) == 5
    assert all(flags == [] for _, _, flags in results)
    assert results[0][1].limited_by == ("registers",)  # 5 blocks of 8 warps: 83.33 %
    assert results[0][1].theoretical_pct == pytest.approx(83.33, abs=0.01)


def test_unreadable_report_raises(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("")
    with pytest.raises(NcuReportError):
        diagnose_report(path, sms=28)


# --- facts from a launch -------------------------------------------------------------------------


def test_from_launch_stats_derives_max_warps_and_smem():
    launch = parse_text_report(RTX3060_CUTLASS.read_text())[0]
    launch_facts = from_launch_stats(LaunchStats.from_launch(launch), 28)
    assert launch_facts.grid_blocks == 8
    assert launch_facts.threads_per_block == 128
    assert launch_facts.registers_per_thread == 254
    assert launch_facts.smem_per_block_bytes == 98_300
    assert launch_facts.sm_count == 28
    assert launch_facts.max_warps_per_sm == 48
    assert (launch_facts.block_limit_registers, launch_facts.block_limit_shared_mem) == (2, 1)


def test_from_launch_stats_without_occupancy_assumes_64_warps():
    stats = LaunchStats.from_launch(NcuLaunch("k", (8, 1, 1), (128, 1, 1), 0, "9.0", ()))
    stats = dataclasses.replace(stats, registers_per_thread=32, dynamic_smem_per_block_bytes=0)
    launch_facts = from_launch_stats(stats, None)
    assert (launch_facts.max_warps_per_sm, launch_facts.sm_count) == (64, None)
    assert occupancy(launch_facts).limited_by == ("warps",)


def test_from_launch_stats_without_launch_statistics_raises():
    stats = LaunchStats.from_launch(NcuLaunch("k", None, None, None, None, ()))
    with pytest.raises(NcuReportError, match="LaunchStats"):
        from_launch_stats(stats, 28)


# --- occupancy -----------------------------------------------------------------------------------


def test_occupancy_names_every_binding_limit_on_a_tie():
    occ = occupancy(
        facts(
            max_active_blocks_per_sm=None,
            threads_per_block=128,
            block_limit_registers=2,
            block_limit_shared_mem=2,
            block_limit_warps=16,
            block_limit_sm=32,
        )
    )
    assert (occ.blocks_per_sm, occ.limited_by, occ.active_warps_per_sm, occ.theoretical_pct) == (
        2,
        ("registers", "shared memory"),
        8,
        12.5,
    )


def test_occupancy_computes_the_warp_limit_when_not_given():
    occ = occupancy(facts(max_active_blocks_per_sm=None, threads_per_block=1024, block_limit_registers=3))
    assert (occ.blocks_per_sm, occ.limited_by) == (2, ("warps",))


def test_occupancy_from_the_occupancy_api_with_no_matching_limit():
    occ = occupancy(facts(max_active_blocks_per_sm=1, block_limit_registers=4))
    assert occ.limited_by == ()
    assert occ.limited_by_text == "an unreported limit"


# --- small_grid: blocks < SMs --------------------------------------------------------------------


@pytest.mark.parametrize("blocks, flagged", [(27, True), (28, False), (29, False)])
def test_small_grid_boundary(blocks, flagged):
    assert ("small_grid" in codes(facts(sm_count=28, grid_blocks=blocks, max_active_blocks_per_sm=1))) is flagged


def test_small_grid_message():
    found = flag(facts(sm_count=28, grid_blocks=27, max_active_blocks_per_sm=1), "small_grid")
    assert found.message == "27 blocks on 28 SMs: 1 SM idle (0.96 waves)"


# --- partial_wave: waves / ceil(waves) < 0.8 -----------------------------------------------------


@pytest.mark.parametrize("blocks, efficiency, flagged", [(15, 0.75, True), (16, 0.8, False), (17, 0.85, False)])
def test_partial_wave_boundary(blocks, efficiency, flagged):
    launch_facts = facts(grid_blocks=blocks, max_active_blocks_per_sm=1, threads_per_block=1024)
    assert codes(launch_facts) == (["partial_wave"] if flagged else [])
    if flagged:
        assert flag(launch_facts, "partial_wave").value == efficiency


def test_partial_wave_message():
    found = flag(facts(grid_blocks=15, max_active_blocks_per_sm=1, threads_per_block=1024), "partial_wave")
    assert found.message == (
        "1.50 waves of 10 block slots (10 SMs x 1): the last wave runs 5 blocks, 75% wave efficiency"
    )


def test_partial_wave_counts_block_slots_of_every_sm():
    # 41 blocks on 10 SMs x 4 slots: 2 waves, the second holding 1 block.
    assert flag(facts(grid_blocks=41), "partial_wave").value == pytest.approx(41 / 80)


def test_a_grid_smaller_than_the_sms_is_small_not_partial():
    assert codes(facts(grid_blocks=5, max_active_blocks_per_sm=1, threads_per_block=1024)) == ["small_grid"]


# --- tile_padding: padded share of multiply-adds > 10 % ------------------------------------------


@pytest.mark.parametrize("m, flagged", [(89, True), (90, False), (91, False)])
def test_tile_padding_boundary(m, flagged):
    launch_facts = facts(gemm_mnk=(m, 128, 64), tile_mnk=(100, 128, 64), sm_count=1)
    assert ("tile_padding" in codes(launch_facts)) is flagged


def test_tile_padding_of_conv_1_on_a_128x128x64_tile_per_filter_tap():
    found = flag(facts(gemm_mnk=CONV_1_GEMM, tile_mnk=TILE_128x128x64, filter_taps=9), "tile_padding")
    assert found.value == 0.875  # 25 % of N and 50 % of K do useful work
    assert found.message == (
        "87.5% of the multiply-adds are tile padding (M 1024->1024: 0%, N 32->128: 75%, K 288->576: 50%)"
    )


def test_tile_padding_of_conv_1_with_k_as_one_dimension():
    found = flag(facts(gemm_mnk=CONV_1_GEMM, tile_mnk=TILE_128x128x64), "tile_padding")
    assert found.value == pytest.approx(1 - 0.25 * 0.9)
    assert "K 288->320: 10%" in found.message


def test_tile_padding_needs_the_problem_and_tile():
    assert "tile_padding" not in codes(facts(gemm_mnk=CONV_1_GEMM))


# --- occupancy_limit: theoretical occupancy < 25 % -----------------------------------------------


@pytest.mark.parametrize("warps, flagged", [(15, True), (16, False), (17, False)])
def test_occupancy_limit_boundary(warps, flagged):
    launch_facts = facts(grid_blocks=10, max_active_blocks_per_sm=1, threads_per_block=32 * warps)
    assert codes(launch_facts) == (["occupancy_limit"] if flagged else [])


def test_occupancy_limit_value_and_message():
    launch_facts = facts(
        grid_blocks=10, max_active_blocks_per_sm=None, threads_per_block=32 * 15, block_limit_shared_mem=1
    )
    found = flag(launch_facts, "occupancy_limit")
    assert found.value == pytest.approx(23.4375)
    assert found.message == (
        "theoretical occupancy 23.44 % (15 of 64 warps per SM, 1 block of 15 warps) is limited by shared memory"
    )


# --- register_spills: spill bytes > 0 ------------------------------------------------------------


@pytest.mark.parametrize("spill_bytes, flagged", [(None, False), (0, False), (1, True)])
def test_register_spills_default_boundary(spill_bytes, flagged):
    assert codes(facts(spill_bytes=spill_bytes)) == (["register_spills"] if flagged else [])


@pytest.mark.parametrize("spill_bytes, flagged", [(15, False), (16, False), (17, True)])
def test_register_spills_custom_threshold(spill_bytes, flagged):
    flagged_codes = codes(facts(spill_bytes=spill_bytes), Thresholds(max_spill_bytes=16))
    assert flagged_codes == (["register_spills"] if flagged else [])


def test_register_spills_message():
    found = flag(facts(spill_bytes=96, registers_per_thread=255), "register_spills")
    assert (found.value, found.message) == (96.0, "ptxas spills 96 bytes (stores + loads) at 255 registers per thread")


# --- split_k_opportunity: blocks < SMs / 2 and >= 8 K-loop iterations ---------------------------


def split_k_facts(tiles: int, k_iterations: int, **changes) -> LaunchFacts:
    gemm = (tiles * 128, 128, k_iterations * 64)
    return facts(sm_count=28, grid_blocks=tiles, gemm_mnk=gemm, tile_mnk=TILE_128x128x64, **changes)


@pytest.mark.parametrize("tiles, flagged", [(13, True), (14, False), (15, False)])
def test_split_k_tile_boundary(tiles, flagged):
    assert ("split_k_opportunity" in codes(split_k_facts(tiles, 9))) is flagged


@pytest.mark.parametrize("k_iterations, flagged", [(7, False), (8, True), (9, True)])
def test_split_k_iteration_boundary(k_iterations, flagged):
    assert ("split_k_opportunity" in codes(split_k_facts(8, k_iterations))) is flagged


def test_split_k_opportunity_of_conv_1_on_an_rtx3060():
    launch_facts = facts(sm_count=28, grid_blocks=8, gemm_mnk=CONV_1_GEMM, tile_mnk=TILE_128x128x64, filter_taps=9)
    found = flag(launch_facts, "split_k_opportunity")
    assert found.value == pytest.approx(8 / 28)
    assert found.message == "8 blocks of 9 K-loop iterations on 28 SMs: split-K over 3 slices would give 24 blocks"


def test_split_k_counts_the_slices_already_there():
    found = flag(split_k_facts(4, 16, split_k_slices=2), "split_k_opportunity")
    assert found.message == "8 blocks of 8 K-loop iterations on 28 SMs: split-K over 6 slices would give 24 blocks"


# --- without an SM count -------------------------------------------------------------------------


def test_rules_that_need_the_sm_count_say_so_and_the_others_still_run():
    launch_facts = facts(sm_count=None, grid_blocks=1, gemm_mnk=CONV_1_GEMM, tile_mnk=TILE_128x128x64, spill_bytes=8)
    assert codes(launch_facts) == ["sm_count_unknown", "tile_padding", "register_spills"]


# --- kernel names --------------------------------------------------------------------------------


def test_kernel_short_name_of_both_name_formats():
    for path in (RTX3060_CUTLASS, H100_CUTLASS):
        name = parse_text_report(path.read_text())[0].kernel_name
        assert kernel_short_name(name) == "ImplicitGemmConvolution 128x128x64, 3 stages"


def test_kernel_short_name_of_a_two_stage_mainloop():
    name = "void Kernel<ImplicitGemmConvolution<ImplicitGemmPipelined<GemmShape<64, 64, 32>, It, It>, Epi>>(Params)"
    assert kernel_short_name(name) == "ImplicitGemmConvolution 64x64x32, 2 stages"


def test_kernel_short_name_falls_back_to_the_first_60_characters():
    name = "void evaluate_loss_kernel<autodiff::MSELoss>(float *, const float *, float *, int)"
    assert kernel_short_name(name) == name.removeprefix("void ")[:60]
    assert kernel_short_name("conv2d_forward_kernel(const float *)") == "conv2d_forward_kernel(const float *)"


def test_kernel_short_name_of_a_tuned_3x_kernel():
    name = ("void cutlass::device_kernel<cutlass_conv_tuner::nvidia_h100_80gb_hbm3::r50_s4_3x3_b32_detail::Kernel>"
            "(T1::Params)")
    assert kernel_short_name(name) == "CUTLASS 3.x r50_s4_3x3_b32"
    gemm = "void cutlass::device_kernel<cutlass_conv_tuner::candidate::TunedConv0_detail::GemmKernel>(T1::Params)"
    assert kernel_short_name(gemm) == "CUTLASS 3.x TunedConv0"
    other = "void cutlass::device_kernel<cutlass3x_sm90_tensorop_gemm_f16_f16_f32_f16_f16_128x128x64_1x1x1_0_tnn>"
    assert kernel_short_name(other) == other.removeprefix("void ")[:60]


# --- what limits each kernel: bound, pipes, tensor cores, the GPU, ncu's advice ------------------------------

from tuner.analysis.explain import explain_report  # noqa: E402
from tuner.analysis.verdict import summarise_rule, tuned_estimate  # noqa: E402
from tuner.core.gpus import lookup  # noqa: E402
from tuner.analysis.ncu import NcuRule  # noqa: E402
from tuner.core.layers import parse_shape  # noqa: E402

NAIVE_SHAPE = "8,32,32,32,32,3,3,1"


def slowest(diagnosis):
    return max(diagnosis.kernels, key=lambda verdict: verdict.time_share)


def test_naive_report_names_the_direct_cuda_core_convolution_and_its_bound():
    diagnosis = explain_report(RTX3060_NAIVE)
    assert diagnosis.gpu.gpu.slug == "rtx3060" and "28 SMs, CC 8.6" in diagnosis.gpu.how
    backward = slowest(diagnosis)
    assert backward.group.kernel_name.startswith("conv2d_backward_kernel")
    assert backward.time_share == pytest.approx(3550 / (278.34 + 8.83 + 8.77 + 357.22 + 3550), abs=1e-3)
    assert backward.convolution and backward.direct_convolution and backward.tensor_cores is False
    assert backward.bound.kind == "compute- and memory-bound"  # SM 92.55 %, memory 92.56 % (L1/TEX 96 %)
    assert "L1/TEX 96.2 %" in backward.bound.detail and "DRAM 1.5 %" in backward.bound.detail
    assert backward.limiter.startswith("direct convolution on CUDA cores, not using tensor cores; "
                                       "compute- and memory-bound")
    assert backward.achieved_occupancy_pct == pytest.approx(85.69)
    forward = next(v for v in diagnosis.kernels if v.group.kernel_name.startswith("conv2d_forward_kernel"))
    assert forward.busiest_pipe == ("ALU", 40.9) and forward.bound.kind == "compute-bound"
    assert forward.direct_convolution
    loss = next(v for v in diagnosis.kernels if v.group.kernel_name.startswith("void evaluate_loss_kernel"))
    assert not loss.convolution and loss.bound.kind == "memory-bound"  # DRAM 69 %
    assert "convolution" not in loss.limiter


def test_rtx3060_cutlass_report_names_the_small_grid():
    diagnosis = explain_report(RTX3060_CUTLASS)
    assert diagnosis.gpu.gpu.slug == "rtx3060" and diagnosis.gpu.how.startswith("its 28 SMs")
    (kernel,) = diagnosis.kernels
    assert kernel.limiter.startswith("small grid: 8 blocks on 28 SMs: 20 SMs idle (0.29 waves); latency-bound")
    assert kernel.tensor_cores is True and kernel.busiest_pipe == ("Tensor", 41.4)
    assert not kernel.cuda_core_convolution
    assert "grid too small: 0.3 full waves across the SMs" in kernel.warnings
    assert diagnosis.results == diagnose_report(RTX3060_CUTLASS, sms=None)  # the table is unchanged


def test_h100_report_says_what_its_speed_of_light_says():
    diagnosis = explain_report(H100_CUTLASS)
    assert diagnosis.gpu.gpu is None and "h100-sxm or h200" in diagnosis.gpu.how  # 132 SMs: ambiguous
    (kernel,) = diagnosis.kernels
    assert kernel.bound.kind == "latency-bound"  # SM 2.01 %, memory 3.44 %
    assert "SM 2.0 % and memory 3.4 % of peak" in kernel.bound.detail
    assert kernel.limiter.startswith("small grid: 8 blocks on 132 SMs")
    assert kernel.tensor_cores is True and kernel.estimate is None
    assert kernel.warnings[0] == "grid of 8 blocks is less than the 132 SMs (ncu est. speedup 93.9 %)"


def test_gpu_override_sets_the_sm_count_and_identity():
    diagnosis = explain_report(RTX3060_CUTLASS, gpu=lookup("a10"))
    assert (diagnosis.gpu.gpu.slug, diagnosis.gpu.how) == ("a10", "--gpu")
    assert diagnosis.kernels[0].limiter.startswith("small grid: 8 blocks on 72 SMs: 64 SMs idle")
    # --sms still wins over the GPU's count
    assert explain_report(RTX3060_CUTLASS, sms=40, gpu=lookup("a10")).kernels[0].limiter.startswith(
        "small grid: 8 blocks on 40 SMs")


def test_direct_convolution_estimate_with_the_shape():
    problem = parse_shape(NAIVE_SHAPE)
    backward = slowest(explain_report(RTX3060_NAIVE, problem=problem))
    estimate = backward.estimate
    assert estimate.tune_command == "python tune.py --shape 8,32,32,32,32,3,3,1,1,1"
    rtx3060 = lookup("rtx3060")
    assert estimate.compute_us == pytest.approx(problem.flops / (25.5e12 * 0.6) * 1e6)
    assert estimate.memory_us == pytest.approx(problem.bytes_moved / (360e9 * 0.9) * 1e6)
    assert estimate.total_us == pytest.approx(2.0 + max(estimate.compute_us, estimate.memory_us))
    assert estimate == tuned_estimate(problem, rtx3060)
    assert 5 < estimate.total_us < 50  # against 3550 µs measured


def test_rule_summaries_are_one_short_line():
    assert summarise_rule(NcuRule("INF", "Tensor is the highest-utilized pipeline (41.4%) based on ...")) is None
    assert summarise_rule(NcuRule("OPT", "This kernel has uncoalesced shared accesses resulting in a total of 1152 "
                                         "excessive wavefronts (2% of the total 71424 wavefronts).", 4.0)) == \
        "shared-memory bank conflicts: 2 % of wavefronts are excess (ncu est. speedup 4 %)"
    long = NcuRule("WRN", "Something new that ncu says. " + "x" * 200)
    assert summarise_rule(long) == "Something new that ncu says"
    longer = summarise_rule(NcuRule("WRN", "y" * 200))
    assert len(longer) == 90 and longer.endswith("...")


def test_a_device_name_in_the_report_identifies_the_gpu_and_its_sm_count(tmp_path):
    path = tmp_path / "named.txt"
    path.write_text("==PROF== Device 0: NVIDIA GeForce RTX 4090\n" + RTX3060_CUTLASS.read_text())
    diagnosis = explain_report(path)
    assert (diagnosis.gpu.gpu.slug, diagnosis.gpu.how) == ("rtx4090", "the report's device name")
    assert diagnosis.kernels[0].limiter.startswith("small grid: 8 blocks on 128 SMs")
    assert "sm_count_inferred" not in [flag.code for flag in diagnosis.kernels[0].flags]


def test_a_block_of_a_warp_and_a_half_counts_as_two_warps(h100):
    """48 threads hold two warps' registers and scheduler slots: the limits kernel_facts derives agree with the
    CTAs an SM holds as the DSL builder works them out, so the diagnosis names the binding limit."""
    from tuner.core.problem import ConvProblem
    from tuner.families import registry
    from tuner.families.dsl_common.build_tools import sm90_blocks_per_sm
    from tuner.measure.run import KernelAttributes

    problem = ConvProblem(n=8, h=56, w=56, c=144, k=144, r=3, s=3, pad=1, stride=2, groups=144)
    config = registry.get("dsl_direct").rules.make_config(problem, {"tile": "4x4", "channels": 24, "columns": 1})
    assert config.threads == 48
    smem = config.build_spec().smem_bytes()
    attributes = KernelAttributes(registers_per_thread=72, static_smem_bytes=0, dynamic_smem_bytes=smem,
                                  local_bytes_per_thread=0, threads_per_block=48,
                                  max_active_blocks_per_sm=sm90_blocks_per_sm(72, smem, 48))
    facts = kernel_facts(config, problem, h100, 2352, attributes, 0)
    assert facts.block_limit_warps == 32
    assert occupancy(facts).limited_by != ()
