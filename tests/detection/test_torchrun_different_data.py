"""scripts/train_detection.py in 2 CPU processes (forked, as torchrun places them: the refusal comes before any
training) whose processes read different data under the same settings (another machine's files at the same path; here
each process in its own folder): each stepped its own schedule and shard and waited in collectives the others never
made, up to train.dist_timeout."""

import json
from pathlib import Path

from detkit import make_quirky_coco, tiny_overrides
from rankforks import two_ranks


def test_processes_that_read_different_data_are_refused_at_once(tmp_path: Path):
    for name in ("a", "b"):
        make_quirky_coco(tmp_path / name / "coco")
    annotations = tmp_path / "b" / "coco" / "annotations" / "instances_train2017.json"
    tree = json.loads(annotations.read_text())
    dropped = tree["images"].pop(0)["id"]  # one train image fewer on rank 1
    tree["annotations"] = [a for a in tree["annotations"] if a["image_id"] != dropped]
    annotations.write_text(json.dumps(tree))
    overrides = tiny_overrides(Path("coco"), tmp_path / "out", **{"train.dist_timeout": 60})
    # the relative data.data_dir is each process's own folder's
    codes, said, seconds = two_ranks(
        "train_detection", [overrides, overrides], tmp_path, [tmp_path / "a", tmp_path / "b"]
    )
    assert seconds < 50, (seconds, said)
    assert codes == [2, 2], said
    errors = [line for text in said for line in text.splitlines() if "error:" in line]
    assert errors == [
        "error: the processes read different data: rank 0 5 train / 5 val samples, rank 1 4 train / 5 val; give every "
        "process (every machine) the same data"
    ], said
    assert not (tmp_path / "out" / "resume.pt").exists()
