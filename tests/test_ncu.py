import dataclasses
from pathlib import Path

import pytest

from tuner.analysis.ncu import (
    LaunchStats,
    NcuLaunch,
    NcuMetric,
    NcuReportError,
    group_launches,
    normalise_unit,
    parse_value,
)
from tuner.analysis.ncu_csv import parse_csv_report
from tuner.analysis.ncu_file import parse_report, read_report
from tuner.analysis.ncu_text import parse_text_report

from conftest import H100_CSV, H100_CUTLASS, RTX3060_CUTLASS, RTX3060_NAIVE  # noqa: E402

SOL = "GPU Speed Of Light Throughput"

CSV_HEADER = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
    '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
)


def csv_row(launch_id: int, section: str, name: str, unit: str, value: str, kernel: str = "k") -> str:
    return (
        f'"{launch_id}","1","app","host","{kernel}","1","7","(256, 1, 1)","(4, 2, 1)","0","8.6",'
        f'"{section}","{name}","{unit}","{value}"'
    )


def launch_with(*metrics: NcuMetric, grid=(1, 1, 1), block=(32, 1, 1), name="k") -> NcuLaunch:
    return NcuLaunch(name, grid, block, 0, "9.0", metrics)


@pytest.fixture(scope="module")
def h100_launches() -> list[NcuLaunch]:
    return parse_text_report(H100_CUTLASS.read_text())


@pytest.fixture(scope="module")
def rtx3060_launches() -> list[NcuLaunch]:
    return parse_text_report(RTX3060_CUTLASS.read_text())


# --- values and units ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("20,977", 20977.0),
        ("1,024", 1024.0),
        ("98.30", 98.3),
        ("0", 0.0),
        ("PolicySpread", "PolicySpread"),
        ("n/a", "n/a"),
    ],
)
def test_parse_value_strips_thousands_commas_and_keeps_text(text, expected):
    assert parse_value(text) == expected


@pytest.mark.parametrize(
    "unit, expected",
    [
        ("usecond", "us"),
        ("nsecond", "ns"),
        ("msecond", "ms"),
        ("cycle/nsecond", "Ghz"),
        ("Gbyte/second", "Gbyte/s"),
        ("Kbyte/block", "Kbyte/block"),
        ("register/thread", "register/thread"),
    ],
)
def test_normalise_unit(unit, expected):
    assert normalise_unit(unit) == expected


# --- text report, ncu 2025.3 layout (H100) -------------------------------------------------------


def test_h100_text_has_two_launches_with_shape_device_and_cc(h100_launches):
    assert len(h100_launches) == 2
    for launch in h100_launches:
        assert launch.kernel_name.startswith("void Kernel<ImplicitGemmConvolution<ImplicitGemmMultistage<")
        assert launch.kernel_name.endswith(">(Params)")
        assert launch.grid == (8, 1, 1)
        assert launch.block == (128, 1, 1)
        assert launch.device == 0
        assert launch.cc == "9.0"


def test_h100_text_reads_every_metric_row_and_no_advice(h100_launches):
    launch = h100_launches[0]
    assert len(launch.metrics) == 40  # 10 speed-of-light + 17 launch statistics + 13 occupancy rows
    assert {m.section for m in launch.metrics} == {SOL, "Launch Statistics", "Occupancy"}
    assert not [m for m in launch.metrics if m.name in ("Metric Name", "OPT") or "Speedup" in m.name]


def test_h100_text_metric_lookup(h100_launches):
    first, second = h100_launches
    assert first.metric("Duration") == NcuMetric(SOL, "Duration", "us", 10.62)
    assert second.metric("Duration").value == 10.78
    assert first.metric("Elapsed Cycles").value == 20977.0
    assert first.metric("Memory Throughput", SOL) == NcuMetric(SOL, "Memory Throughput", "%", 3.44)
    assert first.metric("Cluster Scheduling Policy").value == "PolicySpread"
    assert first.metric("Dynamic Shared Memory Per Block").unit == "Kbyte/block"
    assert first.metric("Duration", "Occupancy") is None
    assert first.metric("No Such Metric") is None


def test_h100_launch_stats(h100_launches):
    stats = LaunchStats.from_launch(h100_launches[0])
    assert stats == LaunchStats(
        duration_us=10.62,
        sm_throughput_pct=2.01,
        memory_throughput_pct=3.44,
        dram_throughput_pct=0.36,
        grid_blocks=8,
        block_threads=128,
        registers_per_thread=254,
        dynamic_smem_per_block_bytes=98_300,
        static_smem_per_block_bytes=0,
        driver_smem_per_block_bytes=1_020,
        sm_count=132,
        waves_per_sm=0.03,
        block_limit_registers=2,
        block_limit_shared_mem=2,
        block_limit_warps=16,
        block_limit_sm=32,
        theoretical_active_warps_per_sm=8.0,
        theoretical_occupancy_pct=12.5,
        achieved_occupancy_pct=6.25,
    )


# --- text report, older layout (RTX 3060) --------------------------------------------------------


def test_rtx3060_text_has_21_launches_without_shape_device_or_cc(rtx3060_launches):
    assert len(rtx3060_launches) == 21
    for launch in rtx3060_launches:
        assert launch.kernel_name.startswith("void cutlass::Kernel<cutlass::conv::kernel::ImplicitGemmConvolution<")
        assert launch.kernel_name.endswith(">(T1::Params)")  # the timestamp and context are not part of the name
        assert (launch.grid, launch.block, launch.device, launch.cc) == (None, None, None, None)
        assert len(launch.metrics) == 58  # 9 sections; the program's own CSV output is not a launch


def test_rtx3060_text_units_are_normalised(rtx3060_launches):
    launch = rtx3060_launches[0]
    assert launch.metric("Duration") == NcuMetric(SOL, "Duration", "us", 36.29)
    assert launch.metric("SM Frequency").unit == "Ghz"
    assert launch.metric("Memory Throughput", "Memory Workload Analysis").unit == "Gbyte/s"
    assert launch.metric("Function Cache Configuration").value == "cudaFuncCachePreferNone"


def test_rtx3060_launch_stats_take_speed_of_light_percentages_not_bandwidth(rtx3060_launches):
    stats = LaunchStats.from_launch(rtx3060_launches[0])
    assert stats.memory_throughput_pct == 9.05  # "Memory [%]", not the 2.32 Gbyte/s of Memory Workload Analysis
    assert stats.sm_throughput_pct == 11.38  # "Compute (SM) [%]"
    assert stats.dram_throughput_pct == 0.69
    assert stats.duration_us == 36.29


def test_rtx3060_launch_stats(rtx3060_launches):
    stats = LaunchStats.from_launch(rtx3060_launches[0])
    assert (stats.grid_blocks, stats.block_threads, stats.registers_per_thread) == (8, 128, 254)
    assert stats.dynamic_smem_per_block_bytes == 98_300
    assert stats.static_smem_per_block_bytes == 0
    assert stats.driver_smem_per_block_bytes == 1_020
    assert stats.sm_count is None  # this ncu version prints no "# SMs"
    assert stats.waves_per_sm == 0.29
    limits = (stats.block_limit_registers, stats.block_limit_shared_mem, stats.block_limit_warps, stats.block_limit_sm)
    assert limits == (2, 1, 12, 16)
    assert (stats.theoretical_occupancy_pct, stats.achieved_occupancy_pct) == (8.33, 8.33)


# --- text report, other kernels (naive conv training) --------------------------------------------


def test_naive_report_reads_five_kernels_including_an_unindented_first_header():
    launches = parse_text_report(RTX3060_NAIVE.read_text())
    assert [launch.kernel_name.split("(")[0] for launch in launches] == [
        "conv2d_forward_kernel",
        "void evaluate_loss_kernel<autodiff::MSELoss>",
        "void compute_loss_error_kernel<autodiff::MSELoss>",
        "conv2d_compute_hidden_error_kernel",
        "conv2d_backward_kernel",
    ]
    first = launches[0]
    assert (first.grid, first.block, first.device, first.cc) == ((2, 2, 256), (16, 16, 1), 0, "8.6")
    assert LaunchStats.from_launch(first).sm_count == 28


def test_naive_report_converts_milliseconds_to_microseconds():
    backward = parse_text_report(RTX3060_NAIVE.read_text())[-1]
    assert backward.metric("Duration").unit == "ms"
    assert LaunchStats.from_launch(backward).duration_us == pytest.approx(3550.0)


# --- CSV report ----------------------------------------------------------------------------------


def test_csv_sample_matches_the_h100_text_report(h100_launches):
    launches = parse_csv_report(H100_CSV.read_text())
    assert len(launches) == 2
    for from_csv, from_text in zip(launches, h100_launches):
        assert from_csv.kernel_name == from_text.kernel_name
        assert (from_csv.grid, from_csv.block, from_csv.device, from_csv.cc) == ((8, 1, 1), (128, 1, 1), 0, "9.0")
        assert LaunchStats.from_launch(from_csv) == LaunchStats.from_launch(from_text)


def test_csv_sample_skips_prof_lines_program_output_and_rule_rows():
    launches = parse_csv_report(H100_CSV.read_text())
    assert [len(launch.metrics) for launch in launches] == [22, 22]
    assert all(metric.name for launch in launches for metric in launch.metrics)
    assert launches[0].metric("Elapsed Cycles").value == 20977.0


def test_csv_without_rule_columns_and_with_prof_lines_inside():
    text = "\n".join(
        [
            "==PROF== Connected to process 1",
            CSV_HEADER,
            csv_row(0, SOL, "Duration", "nsecond", "1,500"),
            "==PROF== Disconnected from process 1",
            csv_row(1, SOL, "Duration", "usecond", "2.5"),
            csv_row(1, "Launch Statistics", "Registers Per Thread", "register/thread", "n/a"),
        ]
    )
    first, second = parse_csv_report(text)
    assert (first.grid, first.block, first.cc) == ((4, 2, 1), (256, 1, 1), "8.6")
    assert LaunchStats.from_launch(first).duration_us == pytest.approx(1.5)
    assert LaunchStats.from_launch(second).duration_us == 2.5
    assert second.metric("Registers Per Thread").value == "n/a"
    assert LaunchStats.from_launch(second).registers_per_thread is None
    assert LaunchStats.from_launch(second).grid_blocks == 8  # from the Grid Size column


def test_csv_from_another_page_is_refused():
    raw_page = '"ID","Process ID","Process Name","Kernel Name","gpu__time_duration.sum"\n"0","1","app","k","1.0"\n'
    with pytest.raises(NcuReportError, match="Metric Name"):
        parse_csv_report(raw_page)


def test_parse_report_picks_the_parser(h100_launches):
    assert len(parse_report(H100_CSV.read_text())) == 2
    assert parse_report(H100_CUTLASS.read_text()) == h100_launches


# --- typed extraction with missing and converted figures -----------------------------------------


def test_launch_stats_of_a_launch_without_metrics_are_none_except_the_header_shape():
    stats = LaunchStats.from_launch(launch_with(grid=(4, 2, 1), block=(64, 2, 1)))
    assert (stats.grid_blocks, stats.block_threads) == (8, 128)
    from_metrics = [f.name for f in dataclasses.fields(stats) if f.name not in ("grid_blocks", "block_threads")]
    assert all(getattr(stats, name) is None for name in from_metrics)


def test_launch_stats_without_header_or_metrics_are_all_none():
    stats = LaunchStats.from_launch(NcuLaunch("k", None, None, None, None, ()))
    assert all(getattr(stats, f.name) is None for f in dataclasses.fields(stats))


@pytest.mark.parametrize(
    "unit, value, microseconds",
    [("us", 10.62, 10.62), ("ns", 1500.0, 1.5), ("ms", 3.55, 3550.0), ("s", 0.5, 500_000.0), ("cycle", 9.0, None)],
)
def test_duration_is_converted_to_microseconds(unit, value, microseconds):
    stats = LaunchStats.from_launch(launch_with(NcuMetric(SOL, "Duration", unit, value)))
    assert stats.duration_us == (None if microseconds is None else pytest.approx(microseconds))


@pytest.mark.parametrize(
    "unit, value, size_bytes",
    [
        ("Kbyte/block", 98.3, 98_300),
        ("byte/block", 580.0, 580),
        ("Mbyte/block", 0.2, 200_000),
        ("Kibyte/block", 1.0, 1024),
    ],
)
def test_shared_memory_is_converted_to_bytes(unit, value, size_bytes):
    launch = launch_with(NcuMetric("Launch Statistics", "Dynamic Shared Memory Per Block", unit, value))
    assert LaunchStats.from_launch(launch).dynamic_smem_per_block_bytes == size_bytes


def test_a_text_value_where_a_number_belongs_reads_as_missing():
    launch = launch_with(NcuMetric("Launch Statistics", "Registers Per Thread", "register/thread", "n/a"))
    assert LaunchStats.from_launch(launch).registers_per_thread is None


# --- grouping ------------------------------------------------------------------------------------


def test_rtx3060_launches_form_one_group_of_21_with_the_median_duration(rtx3060_launches):
    (group,) = group_launches(rtx3060_launches)
    assert group.count == 21
    assert group.median_duration_us == pytest.approx(36.32)
    assert (group.grid, group.block) == (None, None)
    assert group.stats.grid_blocks == 8


def test_h100_launches_form_one_group_of_two(h100_launches):
    (group,) = group_launches(h100_launches)
    assert (group.count, group.grid, group.block) == (2, (8, 1, 1), (128, 1, 1))
    assert group.median_duration_us == pytest.approx((10.62 + 10.78) / 2)


def test_groups_split_on_kernel_name_grid_and_block_in_order_of_first_launch():
    launches = [
        launch_with(grid=(8, 1, 1), name="a"),
        launch_with(grid=(16, 1, 1), name="a"),
        launch_with(grid=(8, 1, 1), name="b"),
        launch_with(grid=(8, 1, 1), block=(64, 1, 1), name="a"),
        launch_with(grid=(8, 1, 1), name="a"),
    ]
    groups = group_launches(launches)
    assert [(g.kernel_name, g.grid, g.block, g.count) for g in groups] == [
        ("a", (8, 1, 1), (32, 1, 1), 2),
        ("a", (16, 1, 1), (32, 1, 1), 1),
        ("b", (8, 1, 1), (32, 1, 1), 1),
        ("a", (8, 1, 1), (64, 1, 1), 1),
    ]
    assert groups[0].median_duration_us is None


def test_groups_without_header_shape_split_on_launch_statistics():
    def old_style(grid_size: float) -> NcuLaunch:
        return NcuLaunch("k", None, None, None, None, (NcuMetric("Launch Statistics", "Grid Size", "", grid_size),))

    groups = group_launches([old_style(8.0), old_style(16.0), old_style(8.0)])
    assert [(g.stats.grid_blocks, g.count) for g in groups] == [(8, 2), (16, 1)]


# --- unreadable reports --------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"", b"   \n\n"])
def test_empty_report_is_refused(tmp_path, content):
    path = tmp_path / "empty.txt"
    path.write_bytes(content)
    with pytest.raises(NcuReportError, match="empty") as error:
        read_report(path)
    assert "\n" not in str(error.value) and str(path) in str(error.value)


def test_text_that_is_not_an_ncu_report_is_refused(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("Layer,N,H,W,C,K,R,S,Runtime,GFLOPs\nconv_1,1,32,32,32,32,3,3,90.5378,0.208469\n")
    with pytest.raises(NcuReportError, match="no kernel launches found") as error:
        read_report(path)
    assert "ncu --page details" in str(error.value) and "\n" not in str(error.value)


def test_binary_report_is_refused_with_an_export_hint(tmp_path):
    path = tmp_path / "profile.ncu-rep"
    path.write_bytes(b"NVPROF\x00\x01\x02\xff\xfe binary junk")
    with pytest.raises(NcuReportError, match="binary.*--import"):
        read_report(path)


def test_missing_report_is_refused(tmp_path):
    with pytest.raises(NcuReportError, match="cannot read"):
        read_report(tmp_path / "nope.txt")


def test_csv_header_without_rows_is_refused():
    with pytest.raises(NcuReportError, match="no kernel launches found"):
        parse_csv_report(CSV_HEADER + "\n==PROF== Disconnected from process 1\n")


def test_parsers_refuse_empty_text():
    for parse in (parse_text_report, parse_csv_report):
        with pytest.raises(NcuReportError, match="empty"):
            parse("")


def test_real_h100_csv_report_recorded_by_the_tuner():
    """tests/data/ncu/h100_ncu_2025.3_conv_1_128x128x64.csv: conv_1's reference configuration (sm80
    128x128x64, 3 stages) validated once under the tuner's own ncu command (profile.ncu_command:
    --csv --page details) on the H100, Nsight Compute 2025.3.1."""
    text = (Path(__file__).parent / "data" / "ncu" / "h100_ncu_2025.3_conv_1_128x128x64.csv").read_text()
    [launch] = parse_csv_report(text)
    stats = LaunchStats.from_launch(launch)
    assert stats.grid_blocks == 8 and stats.block_threads == 128
    assert stats.registers_per_thread == 254
    assert stats.sm_count == 132
    assert stats.block_limit_registers == 2 and stats.block_limit_shared_mem == 2
    assert stats.theoretical_occupancy_pct == pytest.approx(12.5)
    assert abs(stats.dynamic_smem_per_block_bytes - 98304) < 100
    assert 0 < stats.duration_us < 100


# --- ncu's rule advice ---------------------------------------------------------------------------------


def test_text_rules_are_read_with_kind_speedup_and_whole_text():
    launches = parse_text_report(RTX3060_NAIVE.read_text())
    backward = launches[-1]
    assert backward.kernel_name.startswith("conv2d_backward_kernel")
    uncoalesced = [rule for rule in backward.rules if "uncoalesced global accesses" in rule.text]
    assert len(uncoalesced) == 1
    rule = uncoalesced[0]
    assert (rule.kind, rule.speedup_pct) == ("OPT", 13.34)
    assert rule.text.startswith("This kernel has uncoalesced global accesses resulting in a total of 1347584")
    assert rule.text.endswith("information on reducing uncoalesced device memory accesses.")  # continuation lines
    assert "  " not in rule.text
    assert any(rule.kind == "INF" and rule.text.startswith("The kernel is utilizing greater than 80.0%")
               for rule in backward.rules)


def test_old_layout_rules_have_no_speedup_and_do_not_disturb_the_metrics(rtx3060_launches):
    first = rtx3060_launches[0]
    kinds = [rule.kind for rule in first.rules]
    assert kinds.count("WRN") == 9 and kinds.count("INF") == 3
    assert all(rule.speedup_pct is None for rule in first.rules)
    assert any(rule.text.startswith("Tensor is the highest-utilized pipeline (41.4%)") for rule in first.rules)
    assert len(first.metrics) == 58


def test_csv_rule_rows_become_rules_with_their_speedup():
    text = (Path(__file__).parent / "data" / "ncu" / "h100_ncu_2025.3_conv_1_128x128x64.csv").read_text()
    [launch] = parse_csv_report(text)
    assert [(rule.kind, rule.speedup_pct) for rule in launch.rules] == [("OPT", None), ("OPT", 93.94), ("OPT", 87.5)]
    assert launch.rules[1].text.startswith("The grid for this launch is configured to execute only 8 blocks")
    assert all(metric.name for metric in launch.metrics)


def test_a_report_over_the_size_limit_is_refused_without_reading_it(tmp_path):
    import time

    from tuner.analysis import ncu_file
    path = tmp_path / "huge.txt"
    with path.open("wb") as stream:  # sparse: 100 MB that take no disk
        stream.truncate(100 * 1000 * 1000)
    started = time.monotonic()
    with pytest.raises(NcuReportError, match=r"100\.0 MB, more than the 64 MiB") as error:
        read_report(path)
    assert time.monotonic() - started < 1
    assert "\n" not in str(error.value) and ncu_file.MAX_REPORT_BYTES == 64 * 1024 * 1024


def test_a_large_binary_file_is_refused_by_its_first_bytes(tmp_path):
    import time

    path = tmp_path / "profile.ncu-rep"
    path.write_bytes(b"NVPROF\0" + bytes(range(256)) * 200_000)  # 51 MB
    started = time.monotonic()
    with pytest.raises(NcuReportError, match="binary.*--import"):
        read_report(path)
    assert time.monotonic() - started < 2


def test_a_directory_is_not_a_report(tmp_path):
    with pytest.raises(NcuReportError, match="is not a file"):
        read_report(tmp_path)


# --- the GUI's Details page copied as text ------------------------------------------------------

def test_a_gui_copy_reads_as_the_text_report_it_was_made_from(rtx3060_launches):
    from conftest import RTX3060_GUI_COPY
    from tuner.analysis.ncu_file import parse_report

    [gui] = parse_report(RTX3060_GUI_COPY.read_text())
    text = rtx3060_launches[0]
    assert gui.kernel_name == text.kernel_name and gui.device == 0
    for name in ("Duration", "Registers Per Thread", "Grid Size", "Block Size", "Waves Per SM", "SM Busy",
                 "Achieved Occupancy", "Block Limit Shared Mem"):
        assert gui.metric(name).value == pytest.approx(text.metric(name).value, rel=1e-3), name
        assert gui.metric(name).section == text.metric(name).section, name
    assert LaunchStats.from_launch(gui).sm_throughput_pct == pytest.approx(11.38)
    assert len(gui.rules) == len(text.rules) and "grid is too small" in gui.rules[0].text


def test_a_gui_copy_with_space_separated_cells_and_size_column():
    from tuner.analysis.ncu_text import parse_gui_report

    text = ("Result  Size  Time  Cycles  GPU  SM Frequency  Process  Attributes\n"
            "12 - 40 - conv2d_kernel  (2, 2, 256)x(16, 16, 1)  3.55 msecond  4,500,000  1 - NVIDIA H100 80GB HBM3"
            "  1.75 cycle/nsecond  [77] app\n"
            "Launch Statistics\n"
            "Grid Size\t1024\tBlock Size\t256\n"
            "Registers Per Thread [register/thread]\t30\n"
            "The grid is fine.\n")
    [launch] = parse_gui_report(text)
    assert (launch.kernel_name, launch.grid, launch.block, launch.device) == ("conv2d_kernel", (2, 2, 256),
                                                                              (16, 16, 1), 1)
    assert launch.metric("Registers Per Thread").value == 30 and launch.metric("Grid Size").section == "Launch Statistics"
    assert [rule.text for rule in launch.rules] == ["The grid is fine."]


# --- one launch in three of ncu's forms -------------------------------------------------------------

@pytest.mark.parametrize("form", ["details.txt", "details.csv", "raw.csv"])
def test_every_form_of_one_recorded_launch_gives_the_same_figures(form):
    from conftest import H100_CUDNN_FORMS
    from tuner.analysis.ncu_file import parse_report

    [launch] = parse_report(H100_CUDNN_FORMS[form].read_text())
    stats = LaunchStats.from_launch(launch)
    assert launch.kernel_name.startswith("sm90_xmma_fprop_implicit_gemm") and launch.grid == (15, 8, 1)
    assert (stats.grid_blocks, stats.block_threads, stats.registers_per_thread) == (120, 384, 168)
    assert stats.sm_count == 132 and stats.waves_per_sm == pytest.approx(0.91)
    assert stats.duration_us == pytest.approx(25.28, rel=0.01)
    assert stats.sm_throughput_pct == pytest.approx(31.7, rel=0.01)
    assert stats.memory_throughput_pct == pytest.approx(37.91, rel=0.01)


def test_the_raw_page_keeps_every_metric_under_its_own_name():
    from conftest import H100_CUDNN_FORMS
    from tuner.analysis.ncu_csv import parse_raw_csv_report

    [launch] = parse_raw_csv_report(H100_CUDNN_FORMS["raw.csv"].read_text())
    assert launch.metric("launch__registers_per_thread", "raw").value == 168
    assert launch.metric("device__attribute_display_name", "raw").value == "NVIDIA H100 80GB HBM3"
    assert launch.metric("Registers Per Thread", "Launch Statistics").value == 168


def test_an_ncu_rep_is_read_through_ncu_report_when_it_is_importable(tmp_path, monkeypatch):
    """A stand-in for Nsight Compute's report interface: the launch's metrics become the raw page's."""
    import sys
    import textwrap
    from tuner.analysis.ncu_file import read_report

    (tmp_path / "ncu_report.py").write_text(textwrap.dedent('''
        METRICS = {"launch__grid_dim_x": ("", "15"), "launch__grid_dim_y": ("", "8"), "launch__grid_dim_z": ("", "1"),
                   "launch__block_dim_x": ("", "384"), "launch__block_dim_y": ("", "1"),
                   "launch__block_dim_z": ("", "1"), "launch__grid_size": ("", "120"),
                   "launch__registers_per_thread": ("register/thread", "168"),
                   "gpu__time_duration.sum": ("ns", "25,280"),
                   "launch__shared_mem_per_block_dynamic": ("byte/block", "231,424"),
                   "launch__shared_mem_per_block_static": ("byte/block", "0"),
                   "launch__waves_per_multiprocessor": ("", "0.91"),
                   "device__attribute_multiprocessor_count": ("", "132"),
                   "device__attribute_display_name": ("", "NVIDIA H100 80GB HBM3")}
        class Metric:
            def __init__(self, unit, value): self._unit, self._value = unit, value
            def unit(self): return self._unit
            def as_string(self): return self._value
        class Action:
            freed = False  # the real interface crashes reading an action whose range was freed
            def name(self): return "sm90_xmma_fprop"
            def metric_names(self):
                assert not self.freed, "an action read after its range was freed"
                return list(METRICS)
            def metric_by_name(self, name): return Metric(*METRICS[name])
        class Range:
            def __init__(self): self.actions = []
            def num_actions(self): return 1
            def action_by_idx(self, index):
                self.actions.append(Action())
                return self.actions[-1]
            def __del__(self):
                for action in self.actions:
                    action.freed = True
        class Context:
            def num_ranges(self): return 1
            def range_by_idx(self, index): return Range()
        def load_report(path): return Context()
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ncu_report", raising=False)
    report = tmp_path / "one.ncu-rep"
    report.write_bytes(b"\0binary")
    [launch] = read_report(report)
    stats = LaunchStats.from_launch(launch)
    assert (launch.grid, launch.block, stats.registers_per_thread) == ((15, 8, 1), (384, 1, 1), 168)
    assert stats.duration_us == pytest.approx(25.28)
    from tuner.analysis.explain import explain_report  # `tune.py diagnose` reads it the same way

    diagnosis = explain_report(report)
    [(_, _, flags)] = diagnosis.results
    assert diagnosis.gpu.gpu.slug == "h100-sxm"
    assert any(flag.code == "small_grid" and "120 blocks on 132 SMs" in flag.message for flag in flags)


def test_an_ncu_rep_without_ncu_report_is_one_line(tmp_path, monkeypatch):
    import tuner.analysis.ncu_file as ncu_file

    monkeypatch.setattr(ncu_file, "ncu_report_folder", lambda: None)
    report = tmp_path / "one.ncu-rep"
    report.write_bytes(b"\0binary")
    with pytest.raises(NcuReportError, match="needs Nsight Compute's Python report interface") as caught:
        ncu_file.read_report(report)
    assert "\n" not in str(caught.value)


def test_an_ncu_rep_that_crashes_ncu_report_is_one_line(tmp_path, monkeypatch):
    """ncu_report is native code: Nsight Compute 2025.3's ended the process with SIGSEGV on a real H100
    report. It runs in a child, so a crash is a one-line error naming the export that reads anyway."""
    import sys
    from tuner.analysis.ncu_file import read_report

    (tmp_path / "ncu_report.py").write_text("import os, signal\n"
                                            "def load_report(path): os.kill(os.getpid(), signal.SIGSEGV)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ncu_report", raising=False)
    report = tmp_path / "one.ncu-rep"
    report.write_bytes(b"\0binary")
    with pytest.raises(NcuReportError, match=r"ncu_report crashed \(signal 11\).*--csv --page raw") as caught:
        read_report(report)
    assert "\n" not in str(caught.value)


def test_an_ncu_rep_metric_is_read_by_its_kind():
    """Nsight Compute's as_string() is None for a number; value() picks the accessor by kind."""
    from tuner.analysis.ncu_rep import metric_text

    class Metric:
        def __init__(self, value): self._value = value
        def as_string(self): return self._value if isinstance(self._value, str) else None
        def value(self): return self._value

    assert [metric_text(Metric(v)) for v in (25600.0, 120, 0.91, "NVIDIA H100 80GB HBM3", None)] == \
        ["25600", "120", "0.91", "NVIDIA H100 80GB HBM3", None]
