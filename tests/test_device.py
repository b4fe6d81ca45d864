"""swinlite.device: the one device resolver and the one autocast-dtype rule of the scripts and the run engine."""

import pytest
import torch

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
