"""data.verify_images has one default and one meaning in every task (swinlite/engine/sections.py): true decodes every
image once before training, false reads each header only. The shared default said true, "check every image and skip
unreadable ones", while every task overrode it with false, each comment in other words."""

import dataclasses

import pytest

from swinlite.classification.config import DataConfig
from swinlite.detection.config import DetDataConfig
from swinlite.engine import sections
from swinlite.segmentation.config import SegDataConfig


def test_the_shared_default_is_false():
    assert sections.DataConfig().verify_images is False


@pytest.mark.parametrize("cls", [DetDataConfig, SegDataConfig, DataConfig])
def test_each_task_has_the_shared_default(cls: type):
    field = next(f for f in dataclasses.fields(cls) if f.name == "verify_images")
    assert field.default is False and cls().verify_images is False
