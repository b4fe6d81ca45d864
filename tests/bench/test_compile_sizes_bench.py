"""--compile, --compile-train and --sizes plumbing on tiny inputs: rows, ratios, tables, CLI parsing (no timing
asserted).

The compilation itself is pinned by tests/test_optimize.py (and torch.compile's train step by
tests/models/test_compile_graph.py); here optimize_for_inference and torch.compile are replaced by the eager model,
so these runs take seconds, on Swin-T's layout narrowed (narrowswin).
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from narrowswin import narrow_swin_t
from swinbench import compiled, sizes
from swinbench.choices import parse_sizes
from swinbench.sizes import SizesConfig, run_sizes, sizes_table
from swinbench.swin import BenchConfig

from swinlite.optimize import Optimized


def test_compile_run_has_eager_and_optimized_rows(monkeypatch):
    narrow_swin_t(monkeypatch)
    calls = []

    def fake_optimize(model, x, check=True):
        calls.append(type(model).__name__)
        return Optimized(lambda inp: model(inp), "eager", 0.0)

    monkeypatch.setattr(compiled, "optimize_for_inference", fake_optimize)
    cfg = BenchConfig(batch=1, img_size=64, models=("swinlite", "timm"), warmup=0, repeats=1)
    result = compiled.run_compile_benchmark(cfg, log=lambda _: None, warm_start=False)
    assert calls == ["SwinTransformer", "SwinTransformer"]
    assert [r["model"] for r in result["rows"]] == ["swinlite", "timm", "swinlite+optimized", "timm+optimized"]
    # the config records what ran: it recorded the tasks, precisions and memory asked for (train, bf16), never run
    recorded = {k: result["config"][k] for k in ("tasks", "precisions", "memory", "profile", "warm_start")}
    assert recorded == dict(tasks=("inference",), precisions=("fp32",), memory=False, profile=False, warm_start=False)
    assert all(r["task"] == "inference" and r["precision"] == "fp32" for r in result["rows"])
    rows = {r["model"]: r for r in result["rows"]}
    assert rows["timm"]["speed_vs_timm"] == 1.0 and rows["timm+optimized"]["notes"] == ["1.00× timm+optimized"]
    assert result["compile"]["swinlite"]["max_difference_from_eager"] == 0.0
    assert result["compile"]["timm"]["warm_start_seconds"] is None
    table = compiled.compile_table(result)
    assert table.count("\n| inference | fp32 |") == 4 and "- timm+optimized: optimize_for_inference took" in table
    assert table.count("serving: eager (the faster)") == 2


def test_compiled_train_run_times_the_compiled_models(monkeypatch):
    narrow_swin_t(monkeypatch)
    compiled_models = []

    def fake_compile(model):
        compiled_models.append(type(model).__name__)
        return model

    cfg = BenchConfig(batch=1, img_size=64, models=("swinlite", "timm"), precisions=("fp32",), warmup=0, repeats=1)
    result = compiled.run_compiled_train_benchmark(cfg, log=lambda _: None, compile_model=fake_compile)
    assert compiled_models == ["SwinTransformer", "SwinTransformer"]
    assert result["config"]["tasks"] == ("train",)  # recorded ("inference", "train") before
    assert [(r["task"], r["precision"], r["model"]) for r in result["rows"]] == [
        ("train", "fp32", "swinlite"),
        ("train", "fp32", "timm"),
    ]
    rows = {r["model"]: r for r in result["rows"]}
    assert rows["timm"]["speed_vs_timm"] == 1.0 and rows["swinlite"]["peak_mb"] > 0
    assert set(result["compile"]) == {"swinlite fp32", "timm fp32"}
    table = compiled.compiled_train_table(result)
    assert table.count("\n| train | fp32 |") == 2 and "First step through torch.compile" in table


def test_benchmark_refuses_two_runs_at_once():
    script = Path(__file__).resolve().parents[2] / "scripts" / "benchmark.py"
    done = subprocess.run([sys.executable, script, "--compile", "--compile-train"], capture_output=True, text=True)
    assert done.returncode == 2 and "--compile and --compile-train are separate runs" in done.stderr


def test_sizes_run_covers_every_task_and_backbone(monkeypatch):
    """The FPN rows' torchvision backbone is a ResNet-18 FPN under the ResNet-50 row's name (the rows, not the
    network, are checked)."""
    narrow_swin_t(monkeypatch)
    resnet_fpn = sizes.resnet_fpn_backbone
    monkeypatch.setattr(
        sizes, "resnet_fpn_backbone", lambda **kwargs: resnet_fpn(**kwargs | {"backbone_name": "resnet18"})
    )
    cfg = SizesConfig(sizes=((32, 34),), batch=1, warmup=0, repeats=1)  # 34: not a patch multiple, timm pads
    result = run_sizes(cfg, log=lambda _: None)
    assert all(r["size"] == [32, 34] for r in result["rows"])
    assert [(r["task"], r["model"]) for r in result["rows"]] == [
        ("inference", "swinlite"),
        ("inference", "timm"),
        ("train", "swinlite"),
        ("train", "timm"),
        ("inference", "swinlite tiny FPN"),
        ("inference", "torchvision resnet50 FPN"),
        ("train", "swinlite tiny FPN"),
        ("train", "torchvision resnet50 FPN"),
    ]
    assert all(r["images_per_s"] > 0 and r["peak_mb"] > 0 for r in result["rows"])
    assert result["rows"][1]["speed_vs_timm"] == 1.0 and result["rows"][-1]["speed_vs_timm"] is None
    assert set(result["profile"]) == {"swinlite", "timm"}
    profiled = result["profile"]["swinlite"]
    assert 0 < sum(op["share"] for op in profiled["ops"]) <= 1 + 1e-6
    assert profiled["calls"] >= len(profiled["ops"]) and 0 < profiled["self_ms"] and 0 < profiled["wall_ms"]
    table = sizes_table(result)
    assert "| 32×34 | train | timm |" in table and "swinlite inference, top operators by self time:" in table
    assert result["timm_attention"].startswith("explicit (fused_attn=False") and "; timm attention: explicit" in table


def test_sizes_without_memory_logs_that_it_is_not_measured():
    """--no-memory logged "peak 0 MB" for every model, a figure it never measured."""
    logged = []
    cfg = SizesConfig(sizes=((32, 32),), batch=1, memory=False, warmup=0, repeats=1)
    rows = sizes._measure({"swinlite": lambda: None}, (32, 32), "inference", cfg, logged.append)
    (line,) = logged
    assert rows[0]["peak_mb"] is None and line.endswith(" img/s, memory not measured") and "peak" not in line


def test_sizes_parse_and_bad_config():
    assert parse_sizes("224, 800x1333,640×480,224x224") == ((224, 224), (800, 1333), (640, 480))  # once each
    with pytest.raises(ValueError, match="HxW"):
        parse_sizes("224x")
    with pytest.raises(ValueError, match="sizes"):
        SizesConfig(sizes=((16, 224),))
    # timm's Swin V2 was built with a padding patch embedding it does not take: a TypeError after the sizes before
    SizesConfig(size="v2_tiny", sizes=((32, 36),))
    with pytest.raises(ValueError, match="multiple of 4; got 34x34 "):
        SizesConfig(size="v2_tiny", sizes=((32, 32), (34, 34)))
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="cuda"):
            SizesConfig(device="cuda")
