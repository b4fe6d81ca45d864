"""ARCHITECTURE.md's list of the keys each task adds to the shared sections names every one of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from swinlite.classification.config import Config
from swinlite.detection.config import DetConfig
from swinlite.engine.config import valid_keys
from swinlite.engine.sections import RunConfig
from swinlite.segmentation.config import SegConfig

ARCHITECTURE = Path(__file__).resolve().parents[1] / "ARCHITECTURE.md"
TASKS = {"Classification": Config, "detection": DetConfig, "segmentation": SegConfig}


def _added_keys(config: type) -> set[str]:
    """The task's own keys: those of its sections that the shared ones lack."""
    return set(valid_keys(config())) - set(valid_keys(RunConfig()))


@pytest.mark.parametrize("task", list(TASKS))
def test_every_key_a_task_adds_is_listed(task: str) -> None:
    """classification's data.re_mode was missing from the list."""
    text = " ".join(ARCHITECTURE.read_text().split())
    listed = re.search(rf"{task} adds (.*?)(?:;|\. Keys that moved)", text)
    assert listed is not None
    names = set(re.findall(r"`(?:\w+\.)?(\w+)`", listed.group(1)))
    missing = sorted(key for key in _added_keys(TASKS[task]) if key.split(".")[1] not in names)
    assert not missing, f"ARCHITECTURE.md's list of the keys {task.lower()} adds lacks {missing}"
