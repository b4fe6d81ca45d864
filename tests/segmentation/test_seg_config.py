"""Segmentation's config: its defaults work with every optimizer the engine takes."""

import torch

from swinlite.engine.config import dump_yaml, to_dict
from swinlite.engine.optim import build_optimizer, check_betas
from swinlite.segmentation.task import SegmentationTask


def test_sgd_needs_no_betas_unset_and_adamw_keeps_the_recipes():
    """optim.opt=sgd failed with "optim.opt=sgd takes no betas; leave optim.betas unset", betas the user never set
    (segmentation's default was (0.9, 0.999)): the default is now the optimizer's own, as in the other tasks, and
    AdamW's own are the recipe's (0.9, 0.999); --print-config shows them unset."""
    for opt in ("sgd", "momentum"):
        check_betas(SegmentationTask.load_config(None, [f"optim.opt={opt}"]).optim)
    cfg = SegmentationTask.load_config()
    assert cfg.optim.opt == "adamw" and cfg.optim.betas is None
    optimizer = build_optimizer(torch.nn.Linear(2, 2), cfg.optim, global_batch=16)
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.param_groups[0]["betas"] == (0.9, 0.999)
    assert "  betas: null\n" in dump_yaml(to_dict(cfg))
