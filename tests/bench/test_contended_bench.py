"""--contended plumbing on tiny inputs: the busy process, the photo loader, random round orders, rows per condition,
the table (no timing asserted). After Ctrl-C the busy process printed a stray "Process SpawnProcess-1:"
traceback before "interrupted": it ignores SIGINT, the benchmark stops it."""

import os
import signal
import time
from contextlib import nullcontext
from dataclasses import asdict
from functools import partial

import pytest
import timm
import torch
from swinbench import contended
from swinbench.report import markdown_table
from swinbench.swin import BenchConfig, machine_info
from swinbench.timing import shuffled_seconds


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        utime, stime = f.read().rsplit(")", 1)[1].split()[11:13]
    return (int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads a process's CPU time from /proc")
def test_busy_core_spins_only_when_set(monkeypatch):
    pids = []
    real_kill = os.kill
    monkeypatch.setattr(contended.os, "kill", lambda pid, sig: pids.append(pid) or real_kill(pid, sig))
    with contended.busy_core() as set_busy:
        pid = pids[0]
        start = cpu_seconds(pid)
        time.sleep(0.3)
        assert cpu_seconds(pid) - start < 0.05  # paused
        set_busy(True)
        time.sleep(0.3)
        assert cpu_seconds(pid) - start > 0.05  # spinning
        real_kill(pid, signal.SIGINT)  # as Ctrl-C sends it to the whole process group: the benchmark stops it
        time.sleep(0.5)
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        assert state in ("R", "S"), "the busy process exited on Ctrl-C (and printed its traceback)"
        set_busy(False)
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z"


def test_rounds_run_every_key_in_a_fresh_order():
    order = []
    fns = {k: (lambda k=k: order.append(k)) for k in "abcd"}
    seen = []
    times = shuffled_seconds(fns, seen.append, warmup=1, repeats=6, seed=1)
    assert all(len(t) == 6 for t in times.values())
    rounds = [order[4 + 4 * r : 8 + 4 * r] for r in range(6)]  # after the warm-up, in key order
    assert all(sorted(r) == list("abcd") for r in rounds) and len({tuple(r) for r in rounds}) > 1
    assert seen[4:] == order[4:]  # each key's condition set just before it runs


def small_start(cfg: BenchConfig, tasks: tuple[str, ...]):
    """start_run with two pico models (the plumbing does not care which Swin it times)."""
    torch.manual_seed(0)
    models = {name: timm.create_model("swinlite_pico_patch2_window4_32") for name in cfg.models}
    result = dict(config=asdict(cfg), machine=machine_info("cpu"), max_output_difference={})
    result["gflop_per_image"] = {task: 0.01 for task in tasks}
    return models, torch.randn(cfg.batch, 3, cfg.img_size, cfg.img_size), result


def test_tiny_contended_run_has_rows_per_condition(monkeypatch):
    monkeypatch.setattr(contended, "PHOTO_SIZE", (40, 60))
    monkeypatch.setattr(contended, "LOADER_BATCHES", 1)
    monkeypatch.setattr(contended, "start_run", small_start)
    monkeypatch.setattr(contended, "matmul_step", partial(contended.matmul_step, n=256))  # a small ceiling to time
    cfg = BenchConfig(batch=1, img_size=32, models=("swinlite", "timm"), precisions=("fp32",), warmup=0, repeats=1)
    result = contended.run_contended(cfg, log=lambda _: None)
    assert not result["config"]["memory"] and not result["config"]["profile"]  # recorded memory: True, never measured
    cells = [(r["task"], r["condition"], r["model"]) for r in result["rows"]]
    assert cells == [
        (task, condition, model)
        for task in ("inference", "train")
        for condition in contended.CONDITIONS
        if task == "inference" or condition != "loader"  # the loader feeds inference only
        for model in ("swinlite", "timm")
    ]
    assert all(r["images_per_s"] > 0 and r["speed_vs_timm"] > 0 and r["faults_per_call"] >= 0 for r in result["rows"])
    assert set(result["matmul_gflops"]) == {
        f"{t} fp32 {c}" for t in ("inference", "train") for c in ("quiet", "busy core")
    }
    table = markdown_table(result)
    assert "| inference | fp32 | loader | swinlite |" in table and "Conditions: quiet:" in table
    with pytest.raises(ValueError, match="shared CPU"):
        contended.run_contended(BenchConfig(models=("timm",)))


def test_loader_pass_runs_the_model_in_its_precision(monkeypatch):
    """The loader rows labelled bf16 ran in fp32: the pass wrapped predict() in a bf16 autocast, which predict's own
    autocast (given no ``amp``) switched off."""
    monkeypatch.setattr(contended, "PHOTO_SIZE", (40, 60))
    monkeypatch.setattr(contended, "LOADER_BATCHES", 1)
    model = timm.create_model("swinlite_pico_patch2_window4_32")
    seen = []  # (autocast on, logits dtype) per forward
    model.register_forward_hook(lambda module, args, out: seen.append((torch.is_autocast_enabled("cpu"), out.dtype)))
    with contended.photo_loader(model, 1, 32) as loader:
        contended._predict_pass(model, loader, "bf16")
        contended._predict_pass(model, loader, "fp32")
    assert seen == [(True, torch.bfloat16), (False, torch.float32)]


@pytest.fixture
def orders(monkeypatch) -> list[list]:
    """run_contended with nothing heavy (no models, busy process, photos or steps that do work); each block's order of
    keys (warm-up included) is recorded in the returned list."""

    def start(cfg: BenchConfig, tasks: tuple[str, ...]):
        result = dict(config=asdict(cfg), machine=machine_info("cpu"), max_output_difference={})
        return dict.fromkeys(cfg.models), None, result | dict(gflop_per_image=dict.fromkeys(tasks, 0.01))

    def recorded(fns, before, *args):
        order = []
        blocks.append(order)
        return shuffled_seconds(fns, lambda key: order.append(key) or before(key), *args)

    blocks: list[list] = []
    monkeypatch.setattr(contended, "start_run", start)
    monkeypatch.setattr(contended, "busy_core", lambda: nullcontext(lambda active: None))
    monkeypatch.setattr(contended, "photo_loader", lambda *args: nullcontext())
    monkeypatch.setattr(contended, "make_step", lambda *args: lambda: None)
    monkeypatch.setattr(contended, "_predict_pass", lambda *args: None)
    monkeypatch.setattr(contended, "matmul_step", lambda *args: (lambda: None, 1))
    monkeypatch.setattr(contended, "shuffled_seconds", recorded)
    return blocks


def test_round_orders_are_drawn_per_run_and_per_block_and_replayed_by_a_seed(orders):
    """Every run used seed 0, so every run (and each precision's block) timed the same order sequence: the three
    contended runs were not independent repeats of "every round in a random order"."""
    cfg = BenchConfig(batch=1, img_size=32, models=("swinlite", "timm"), tasks=("inference",), warmup=0, repeats=4)

    def run(seed: int | None = None) -> tuple[int, list[list]]:
        orders.clear()
        result = contended.run_contended(cfg, log=lambda _: None, order_seed=seed)
        assert len(orders) == 2  # fp32, bf16
        return result["config"]["order_seed"], [list(block) for block in orders]

    (seed_a, orders_a), (seed_b, orders_b) = run(), run()
    assert seed_a != seed_b and orders_a != orders_b
    assert orders_a[0] != orders_a[1]  # fp32 and bf16: orders of their own
    assert run(seed_a) == (seed_a, orders_a) and run(7) == run(7)


def test_the_header_says_the_loader_rows_use_the_quiet_ceiling(orders):  # the run stubbed as for the orders
    cfg = BenchConfig(batch=1, img_size=32, models=("swinlite", "timm"), tasks=("inference",), warmup=0, repeats=1)
    table = markdown_table(contended.run_contended(cfg, log=lambda _: None, order_seed=0))
    assert "its % of matmul ceiling is of the quiet ceiling" in table
