"""Segmentation's config: its defaults work with every optimizer the engine takes."""

import re

import pytest
import torch

from swinlite.engine.config import dump_yaml, to_dict
from swinlite.engine.distributed import DistInfo
from swinlite.engine.optim import build_optimizer, check_optimizer
from swinlite.segmentation.task import SegmentationTask, syncs_batchnorm


def test_sgd_needs_no_betas_unset_and_adamw_keeps_the_recipes():
    """optim.opt=sgd failed with "optim.opt=sgd takes no betas; leave optim.betas unset", betas the user never set
    (segmentation's default was (0.9, 0.999)): the default is now the optimizer's own, as in the other tasks, and
    AdamW's own are the recipe's (0.9, 0.999); --print-config shows them unset."""
    for opt in ("sgd", "momentum"):
        check_optimizer(SegmentationTask.load_config(None, [f"optim.opt={opt}"]).optim)
    cfg = SegmentationTask.load_config()
    assert cfg.optim.opt == "adamw" and cfg.optim.betas is None
    optimizer = build_optimizer(torch.nn.Linear(2, 2), cfg.optim, global_batch=16)
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.param_groups[0]["betas"] == (0.9, 0.999)
    assert "  betas: null\n" in dump_yaml(to_dict(cfg))


@pytest.mark.parametrize("world", ["1", "2"])
def test_a_batch_of_one_is_refused_where_batchnorm_is_not_synced(world, monkeypatch):
    """data.batch_size=1 under torchrun on the CPU: the check was skipped for any WORLD_SIZE of 2 or more, while
    SyncBatchNorm pools the processes' images on CUDA alone; every rank crashed after the data scan with torch's
    "Expected more than 1 value per channel when training"."""
    monkeypatch.setenv("WORLD_SIZE", world)
    monkeypatch.setenv("RANK", "0")
    cfg = SegmentationTask.load_config(None, ["data.batch_size=1", "train.device=cpu"])
    with pytest.raises(ValueError, match="the heads' BatchNorm needs at least 2 images per step and process"):
        SegmentationTask.check_config(cfg)


@pytest.mark.parametrize(("device", "deterministic"), [("cuda", True), ("auto", True), ("cpu", True), ("cuda", False)])
def test_deterministic_algorithms_on_cuda_are_refused_before_any_data(device, deterministic, monkeypatch):
    """train.deterministic=true on CUDA crashed the first training step: nll_loss2d (summed) and the backwards of
    UperNet's adaptive average pooling and bilinear upsampling have no deterministic CUDA kernel. On the CPU, or with
    train.deterministic=false, the check passes."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    cfg = SegmentationTask.load_config(None, [f"train.device={device}", f"train.deterministic={deterministic}"])
    if device == "cpu" or not deterministic:
        SegmentationTask.check_config(cfg)
        return
    refused = ("train.deterministic=true on cuda:0: torch has no deterministic CUDA kernel for the per-pixel "
               "cross-entropy (nll_loss2d, summed) nor for the backward of UperNet's adaptive average")  # fmt: skip
    with pytest.raises(ValueError, match=re.escape(refused)) as info:
        SegmentationTask.check_config(cfg)
    assert str(info.value).endswith("set train.deterministic=false on CUDA, or train deterministically on the CPU "
                                    "(train.device=cpu)")  # fmt: skip


def test_a_stride_is_refused_with_whole_mode():
    """data.test_stride with data.test_mode=whole (the default) was ignored: whole images validated, the stride
    recorded in config.yaml and the checkpoint's preprocessing (the evaluate scripts refuse --stride with it)."""
    stride = ["data.test_stride=[16,16]", "train.device=cpu"]
    SegmentationTask.check_config(SegmentationTask.load_config(None, [*stride, "data.test_mode=slide"]))
    refused = ("data.test_stride is the windows' step of slide mode, and the test mode is whole (each image predicted "
               "whole): drop data.test_stride, or set data.test_mode=slide")  # fmt: skip
    with pytest.raises(ValueError, match=re.escape(refused)):
        SegmentationTask.check_config(SegmentationTask.load_config(None, stride))


@pytest.mark.parametrize(
    ("settings", "unused"),
    [(["model.aux_weight=0", "model.aux_channels=32"], True), (["model.aux_channels=32"], False),
     (["model.aux_weight=0"], False)],
)  # fmt: skip
def test_an_auxiliary_width_without_an_auxiliary_head_is_warned_of(settings: list[str], unused: bool, recwarn):
    """model.aux_channels with model.aux_weight=0 (no auxiliary head is built) changed nothing, without a word, and
    config.yaml recorded it as if used."""
    SegmentationTask.check_config(SegmentationTask.load_config(None, [*settings, "train.device=cpu"]))
    said = [str(w.message) for w in recwarn]
    assert said == (["model.aux_channels is unused: model.aux_weight=0 (no auxiliary head)"] if unused else [])


def test_batchnorm_is_synced_under_torchrun_on_cuda_alone():
    """The one rule the batch size check and build_model share."""
    assert syncs_batchnorm(DistInfo(0, 2), torch.device("cuda", 0))
    assert not syncs_batchnorm(DistInfo(0, 2), torch.device("cpu"))
    assert not syncs_batchnorm(DistInfo(), torch.device("cuda", 0))
