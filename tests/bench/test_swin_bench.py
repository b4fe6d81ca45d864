"""Benchmark plumbing: the memory probe, ratios, tables, JSON, and tiny end-to-end runs (no timing asserted)."""

import json
import mmap
import statistics

import pytest
import torch
from narrowswin import narrow_swin_t
from swinbench.rel_pos_1d import run_rel_pos_1d
from swinbench.report import markdown_table, profile_tables, rel_pos_1d_table, write_json
from swinbench.swin import BenchConfig, Row, _synced, add_ratios, peak_memory_bytes, run_benchmark, start_run
from swinbench.timing import FaultCounted, paired_ratio


def test_peak_memory_counts_live_tensors_at_the_worst_moment():
    def step():
        a = torch.empty(2**20)  # 4 MiB
        b = torch.empty(2**21)  # 8 MiB: 12 MiB live
        del a, b
        c = torch.empty(2**21)  # 8 MiB live
        del c

    peak = peak_memory_bytes(step, "cpu")
    assert 12 * 2**20 <= peak < 12.1 * 2**20


def test_cuda_timing_and_memory_read_the_requested_gpu(monkeypatch):
    """--device cuda:1: the syncs and memory counters are those of GPU 1, not the current device (GPU 0; nothing
    calls set_device). torch.cuda's functions are replaced by ones that record the device they are given."""
    calls = []
    for name in ("synchronize", "memory_allocated", "reset_peak_memory_stats", "max_memory_allocated"):
        monkeypatch.setattr(torch.cuda, name, lambda device=None, name=name: calls.append((name, device)) or 0)
    _synced(lambda: None, "cuda:1")()
    peak_memory_bytes(lambda: None, "cuda:1")
    assert len(calls) == 6 and {device for _, device in calls} == {"cuda:1"}


def test_page_faults_of_each_call_are_counted():
    sizes = iter([2**26, 0])  # 64 MiB, then nothing

    def touch() -> None:
        size = next(sizes)
        if size:  # an anonymous mapping of its own: fresh pages whatever the allocator holds (malloc may reuse some)
            with mmap.mmap(-1, size) as pages:
                torch.frombuffer(pages, dtype=torch.uint8)[::4096].fill_(1)  # a byte of every page: faulted in

    counted = FaultCounted(touch)
    counted(), counted()
    assert counted.faults[0] >= 16 > counted.faults[1]  # 2 MiB pages (transparent huge pages) at the least
    assert counted.median(1) == counted.faults[1] and counted.median(2, per=2) == sum(counted.faults) / 4


def _row(task: str, precision: str, model: str, rounds: list[float], **kwargs) -> Row:
    s = statistics.median(rounds)
    return Row(task, precision, model, s, 1 / s, 0.5, round_seconds=rounds, **kwargs)


def test_ratios_are_against_timm_of_the_same_task():
    rows = [
        _row("train", "fp32", "timm", [1.2, 1.0, 0.9], peak_mb=100.0),
        _row("train", "fp32", "swinlite", [0.8, 1.0, 0.6], peak_mb=80.0),  # medians: 1.25x
        Row("train", "bf16", "swinlite", 0.5, 2.0, 0.1),
        # under load (a burst in round 3 for timm, in rounds 4-5 for both): medians 5.8x, per round 0.99x
        _row("inference", "bf16", "timm", [0.034, 0.037, 0.607, 0.430, 0.390]),
        _row("inference", "bf16", "swinlite", [0.039, 0.061, 0.067, 0.434, 0.370]),
        _row("inference", "fp32", "timm", [0.100]),
        Row("inference", "fp32", "swinlite", 0.050, 20.0, 0.5),  # no rounds: the ratio of the medians
    ]
    add_ratios(rows)
    per_round = [a / b for a, b in zip(rows[3].round_seconds, rows[4].round_seconds, strict=True)]
    assert rows[1].speed_vs_timm == pytest.approx(1.5) and rows[1].memory_vs_timm == pytest.approx(0.8)
    assert rows[1].speed_vs_timm_range == pytest.approx([1.0, 1.5])  # per round: 1.5, 1.0, 1.5
    assert rows[1].speed_vs_timm_fp32 == rows[1].speed_vs_timm  # fp32 timm: the same rounds
    assert rows[2].speed_vs_timm is None and rows[2].speed_vs_timm_fp32 == pytest.approx(2.0)  # other rounds: medians
    assert rows[4].speed_vs_timm == pytest.approx(statistics.median(per_round)) == pytest.approx(0.99, abs=0.01)
    assert rows[4].speed_vs_timm_range == pytest.approx([min(per_round), max(per_round)])
    assert rows[4].speed_vs_timm_fp32 == pytest.approx(0.100 / 0.067)  # against timm fp32 100 ms: medians
    assert rows[6].speed_vs_timm == pytest.approx(2.0) and rows[6].speed_vs_timm_range is None


def test_paired_ratio_needs_the_same_rounds():
    assert paired_ratio([2.0, 3.0, 30.0], [1.0, 3.0, 1.0]) == 2.0
    with pytest.raises(ValueError, match="same rounds.*got 3 and 2"):
        paired_ratio([2.0, 3.0, 30.0], [1.0, 3.0])


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="models"):
        BenchConfig(models=("swinlite", "resnet"))
    with pytest.raises(ValueError, match="batch"):
        BenchConfig(batch=0)


def test_tiny_run_writes_table_and_json(tmp_path, monkeypatch):
    """Swin-T's layout, narrowed (narrowswin): the run's rows, profiles, table and JSON."""
    narrow_swin_t(monkeypatch)
    cfg = BenchConfig(
        batch=1, img_size=64, models=("swinlite", "timm"), precisions=("fp32",), warmup=0, repeats=1, profile=True
    )
    result = run_benchmark(cfg, log=lambda _: None)
    assert [(r["task"], r["model"]) for r in result["rows"]] == [
        ("inference", "swinlite"),
        ("inference", "timm"),
        ("train", "swinlite"),
        ("train", "timm"),
    ]
    assert all(r["images_per_s"] > 0 for r in result["rows"])
    assert all(r["peak_mb"] > 0 for r in result["rows"] if r["task"] == "train")
    assert result["gflop_per_image"]["train"] > 2 * result["gflop_per_image"]["inference"] > 0
    assert all(r["faults_per_call"] >= 0 for r in result["rows"])
    table = markdown_table(result)
    assert table.count("\n| inference") == 2 and "| train | fp32 | swinlite |" in table
    assert "| memory × timm | page faults per call |" in table and "Page faults per call: the process's" in table
    assert set(result["matmul_gflops"]) == {"inference fp32", "train fp32"}
    assert set(result["profile"]) == {f"{t} fp32 {m}" for t in ("inference", "train") for m in ("swinlite", "timm")}
    assert "train fp32 swinlite, top operators by self time: (the matmuls among them:" in table
    assert "ms of self time in all, " in table and "unprofiled step" in table
    for p in result["profile"].values():
        assert 0 < sum(op["share"] for op in p["ops"]) <= 1 + 1e-6
        assert p["calls"] >= len(p["ops"]) and p["self_ms"] > 0 and p["wall_ms"] > 0
    assert all(len(r["round_seconds"]) == 1 for r in result["rows"]) and result["rows"][0]["speed_vs_timm_range"]
    path = tmp_path / "out" / "bench.json"
    write_json(result, path)
    assert json.loads(path.read_text())["rows"] == result["rows"]


def test_cuda_profiles_count_the_gemm_kernels_as_matmuls_and_shorten_template_names():
    """On CUDA the profile lists kernels, not operators: cuBLAS's and CUTLASS's GEMMs are the matmuls (an H200 table
    said 0 % with three GEMMs on top), and a templated kernel's name (600 characters) is cut to its start."""
    copy = "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<" + "x" * 600 + ">(int)"
    ops = [
        dict(op="sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_execute_kernel__5x_cublas", share=0.5),
        dict(op="cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8", share=0.2),
        dict(op="fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)", share=0.2),
        dict(op=copy, share=0.1),
    ]
    for op in ops:
        op.update(ms=1.0, calls=3)
    lines = profile_tables({"inference": dict(ops=ops, calls=12, self_ms=4.0, wall_ms=8.0)})
    assert "(the matmuls among them: 70% of the total; 12 ran, 4.0 ms of self time in all, 50% of" in lines[1]
    assert lines[-1] == f"| {copy[:100]}… | 10.0% | 1.0 | 3 |"
    assert lines[-4].startswith(f"| {ops[0]['op']} | 50.0% |")  # 87 characters: kept whole


def test_flops_are_counted_on_timms_model_when_only_swinlite_runs(monkeypatch):
    """Where swinlite's fast path runs a private CPU attention kernel the FLOP counter does not see (on every CPU
    but AVX2 ones), counting on swinlite would undercount (Swin-T's layout, narrowed: narrowswin)."""
    narrow_swin_t(monkeypatch)
    counts = []
    for models in (("swinlite",), ("timm",)):
        cfg = BenchConfig(batch=1, img_size=64, models=models, precisions=("fp32",), warmup=0, repeats=1, memory=False)
        counts.append(start_run(cfg, ("inference", "train"))[2]["gflop_per_image"])
    assert counts[0] == counts[1]


def test_json_is_strict_with_a_figure_that_is_not_finite(tmp_path):
    def refuse(constant: str) -> None:
        raise ValueError(f"not strict JSON: {constant}")

    write_json({"rows": [{"img_per_s": float("nan"), "ratio": float("inf")}]}, tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text(), parse_constant=refuse) == {
        "rows": [{"img_per_s": None, "ratio": None}]
    }


def test_rel_pos_1d_run_checks_the_loop_and_writes_a_table(tmp_path):
    result = run_rel_pos_1d(seq_len=24, dim=16, num_heads=2, batch=1, loop_check_len=8, warmup=0, repeats=1)
    names = [r["name"] for r in result["rows"]]
    assert names[0].startswith("plain attention") and names[-1] == "double loop"
    assert "auto: gather at this L" in names[1]  # 24 * 24 * 8 elements: small enough to gather
    assert result["rows"][0]["vs_plain"] == 1.0 and all(r["ms"] > 0 for r in result["rows"])
    assert all(r["seq_len"] == 24 for r in result["rows"])
    table = rel_pos_1d_table(result)
    assert table.count("\n| ") == len(result["rows"]) + 1 and "L 24, width 16, 2 heads, batch 1" in table
    # a time ratio, where the Swin tables' "× timm" is a speed ratio: the table says which way it reads
    assert "| time × plain |" in table and "time × plain: the time over plain attention's (above 1: slower)" in table
    write_json(result, tmp_path / "rel.json")
    assert json.loads((tmp_path / "rel.json").read_text())["rows"] == result["rows"]
    with pytest.raises(ValueError, match="repeats"):
        run_rel_pos_1d(repeats=0)


def test_deploy_table_has_every_row_and_check():
    from swinbench.deploy import deploy_table

    machine = {"cpu": "cpu", "threads": 2, "torch": "t", "timm": "m", "load_average_before": [1.0, 1.0, 1.0]}
    row = {"case": "224x224 b1", "variant": "ORT INT8", "ms": 12.34, "vs_ort_fp32": 1.61,
           "vs_ort_fp32_range": [1.5, 1.7], "max_diff": 0.02}  # fmt: skip
    result = {"config": {"model": "swinlite_tiny", "warmup": 1, "repeats": 7}, "machine": machine,
              "file_mb": {"any": 110.0, "int8": 29.0}, "rows": [row],
              "checks": [{"size": "97x131", "logits": 2e-6, "features": 3e-6}]}  # fmt: skip
    table = deploy_table(result)
    assert "| 224x224 b1 | ORT INT8 | 12.3 | 1.61 | 1.50–1.70 | 2.0e-02 |" in table
    assert "| 97x131 | 2.0e-06 | 3.0e-06 |" in table and "INT8 29 MB" in table
