"""swinlite.device: the one device resolver and the one autocast-dtype rule of the scripts and the run engine, and
the compiler loaded without a note about CUDA on a machine without a GPU."""

import os
import subprocess
import sys
import warnings

import pytest
import timm
import torch

import swinlite
from swinlite.device import autocast_dtype, available_devices, resolve_device


def test_auto_and_explicit_devices():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == (torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu"))
    if torch.cuda.is_available():
        assert resolve_device("cuda", local_rank=0) == torch.device("cuda", 0)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("gpu0", "--device 'gpu0' is not a device; valid here: "),
        ("cuda:99", "--device cuda:99: "),
        ("xpu", "--device xpu: xpu is not available here; valid here: "),
    ],
)
def test_a_device_this_machine_lacks_is_one_line_naming_the_valid_ones(name, message):
    with pytest.raises(ValueError) as info:
        resolve_device(name)
    text = str(info.value)
    assert text.startswith(message) and "\n" not in text and ", ".join(available_devices()) in text


@pytest.mark.parametrize("name", ["auto", "cuda"])
@pytest.mark.parametrize("visible", [None, "3"])
def test_a_local_rank_past_this_machines_gpus_is_one_line_naming_it(name, visible, monkeypatch):
    """torchrun --nproc_per_node=4 on 2 GPUs (or one GPU per process through CUDA_VISIBLE_DEVICES): auto and cuda
    gave LOCAL_RANK=3 cuda:3, and the run died in torch.cuda.set_device with "invalid device ordinal"."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert resolve_device(name, local_rank=1) == torch.device("cuda", 1)
    with pytest.raises(ValueError) as info:
        resolve_device(name, local_rank=3, option="train.device")
    text = str(info.value)
    seen = "CUDA_VISIBLE_DEVICES unset" if visible is None else "CUDA_VISIBLE_DEVICES='3'"
    assert text.startswith(f"train.device {name}: this process's LOCAL_RANK=3 takes GPU 3, and it sees 2 CUDA devices "
                           f"({seen}): start at most 2 processes per machine"), text  # fmt: skip
    assert "\n" not in text and text.endswith("valid here: auto, cpu, cuda, cuda:0, cuda:1")


def test_the_option_is_named_as_the_user_gave_it():
    with pytest.raises(ValueError, match="train.device 'gpu0' is not a device"):
        resolve_device("gpu0", option="train.device")


def test_autocast_names_map_to_dtypes_and_fp16_off_cuda_is_refused_naming_the_option():
    cpu = torch.device("cpu")
    assert [autocast_dtype(n, cpu) for n in ("none", "bf16")] == [None, torch.bfloat16]
    with pytest.raises(ValueError, match="^--amp fp16 needs CUDA; use --amp bf16 on cpu$"):
        autocast_dtype("fp16", cpu)
    with pytest.raises(ValueError, match="^train.amp=fp16 needs CUDA; use train.amp=bf16 on cpu$"):
        autocast_dtype("fp16", cpu, option="train.amp")
    with pytest.raises(ValueError, match="^--amp fp32 is not an autocast dtype; valid: none, bf16, fp16$"):
        autocast_dtype("fp32", cpu)


@pytest.mark.parametrize("kernels", [False, True])
def test_bf16_on_a_cpu_without_bf16_kernels_warns_that_it_is_emulated(kernels, monkeypatch):
    """A train step of the pico in bf16 took 12-14x fp32's on an AVX2 CPU, where oneDNN has no bfloat16 kernels;
    where it has them (AVX-512), no warning. CUDA is not this CPU's business."""
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: kernels)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert autocast_dtype("bf16", torch.device("cpu"), option="train.amp") == torch.bfloat16
        assert autocast_dtype("bf16", torch.device("cuda")) == torch.bfloat16
    said = [str(w.message) for w in caught]
    if kernels:
        assert said == []
    else:
        assert len(said) == 1 and said[0].startswith("train.amp=bf16 on a CPU without bfloat16 kernels"), said
        assert "slower than train.amp=none" in said[0]


# One interpreter started for both: after ``import torch`` a forked child imports the compiler as torch alone does
# (its stderr to a file), the parent through swinlite's quiet loader; each prints whether CUDA_HOME was set.
NOTE_TWICE = """
import os, sys, torch
child = os.fork()
if child == 0:
    os.dup2(os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT), 2)
    import torch.utils.cpp_extension as c
    os._exit(0 if c.CUDA_HOME else 3)
_, status = os.waitpid(child, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
import swinlite.device as d
d.load_compiler_quietly()
import torch.utils.cpp_extension as c
assert c.CUDA_HOME
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch logs the note only where no GPU is found")
def test_compiling_on_a_machine_without_a_gpu_logs_no_cuda_note(tmp_path):
    """With a CUDA toolkit (CUDA_HOME) and no GPU, importing torch.utils.cpp_extension, as every torch.compile does,
    logs "No CUDA runtime is found" (a process that imports it as torch alone does); swinlite's compiles
    (optimize_for_inference, train.compile) load it quietly (a process that loads it through swinlite)."""
    loud = tmp_path / "loud.txt"
    env = {**os.environ, "CUDA_HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", NOTE_TWICE, str(loud)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert "No CUDA runtime is found" in loud.read_text()
    assert "No CUDA runtime is found" not in result.stderr, result.stderr


def test_optimize_for_inference_loads_the_compiler_quietly(monkeypatch):
    class Loaded(Exception):
        pass

    def load() -> None:
        raise Loaded

    monkeypatch.setattr("swinlite.optimize.load_compiler_quietly", load)
    model = timm.create_model("swinlite_pico_patch2_window4_32", depths=(1,), num_heads=(1,)).eval()
    with pytest.raises(Loaded):
        swinlite.optimize_for_inference(model, torch.randn(1, 3, 8, 8))
