"""data.size_step against data.train_sizes: a step that never reaches the range's high end is refused early."""

import re
from pathlib import Path

import pytest

from swinlite.detection.config import DetConfig
from swinlite.detection.task import DetectionTask
from swinlite.detection.transforms import train_sizes
from swinlite.engine.preflight import check_run


def _config(sizes: tuple[int, int], step: int, data_dir: Path) -> DetConfig:
    cfg = DetConfig()
    cfg.data.train_sizes, cfg.data.size_step, cfg.data.data_dir = sizes, step, str(data_dir)
    return cfg


def test_a_step_that_does_not_divide_the_span_is_refused_before_the_data_is_looked_for(tmp_path: Path):
    """train_sizes [56, 72] in steps of 10 drew 56 and 66 alone: 72, which the range names, was silently never drawn."""
    message = (
        "data.train_sizes=[56, 72] with data.size_step=10 never draws 72 (sizes 56, 66): choose a data.size_step "
        "that divides 16, or end data.train_sizes at 66 or 76"
    )
    cfg = _config((56, 72), 10, tmp_path / "absent")
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        DetectionTask.check_config(cfg)
    with pytest.raises(ValueError, match=re.escape(message)):  # not "annotation file ... does not exist"
        check_run(DetectionTask, cfg)


def test_a_long_range_names_its_sizes_in_short():
    cfg = _config((480, 800), 30, Path("unused"))
    with pytest.raises(ValueError, match=re.escape("never draws 800 (sizes 480, 510, ..., 780): choose")):
        DetectionTask.check_config(cfg)


@pytest.mark.parametrize(("sizes", "step"), [((56, 72), 8), ((56, 72), 16), ((480, 800), 32), ((800, 800), 7)])
def test_a_dividing_step_passes_and_draws_both_ends(sizes: tuple[int, int], step: int):
    cfg = _config(sizes, step, Path("unused"))
    DetectionTask.check_config(cfg)
    assert train_sizes(cfg.data)[0] == sizes[0] and train_sizes(cfg.data)[-1] == sizes[1]


def test_large_scale_jitter_draws_no_train_sizes_and_is_not_refused_for_them():
    """data.lsj=true crops a test_size square: train_sizes and size_step are unused, and were refused all the same."""
    cfg = _config((56, 72), 10, Path("unused"))
    cfg.data.lsj = True
    DetectionTask.check_config(cfg)
