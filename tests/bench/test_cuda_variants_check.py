"""benchmarks/cuda_variants_check.py (gpu_run.sh's part cuda_variants) on a machine without CUDA: one error line."""

from __future__ import annotations

import pytest
import timm
import torch
from cuda_variants_check import main


@pytest.mark.parametrize("argv", [[], ["--device", "cuda:1", "--batches", "1"]])
def test_cuda_without_cuda_is_one_error_line_before_the_models(argv, monkeypatch, capsys) -> None:
    """It ended in a traceback, "RuntimeError: Found no NVIDIA driver", from the first model moved to the GPU."""

    def built(*args, **kwargs):
        raise RuntimeError("the models were built: the device was not refused before them")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(timm, "create_model", built)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: --device cuda") and "torch.cuda.is_available() is False" in err
    assert err.rstrip().endswith("--device cpu")
