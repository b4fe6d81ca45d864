"""docs/detection.md against the code: what shows every config key (--print-config; --help no longer lists them,
64b0a0f), the schedules detection takes (poly too), and what frozen_stages=1 freezes (out_norms.0 too)."""

import dataclasses

import timm
import yaml
from scriptkit import REPO, run_script

import swinlite  # noqa: F401 (registers the models)
from swinlite.detection.config import DetConfig
from swinlite.engine.config import flatten, to_dict

DOC = " ".join((REPO / "docs" / "detection.md").read_text().split())


def test_print_config_is_what_shows_every_key(capsys):
    assert "`--help` lists them all" not in DOC and "(`--print-config` prints them all" in DOC
    assert run_script("train_detection", ["--print-config"]) == 0
    assert set(flatten(yaml.safe_load(capsys.readouterr().out))) == set(flatten(to_dict(DetConfig())))


def test_the_schedule_row_names_every_kind():
    """It said "`step` or `cosine`"; poly is accepted too."""
    kind = next(f for f in dataclasses.fields(DetConfig().schedule) if f.name == "kind")
    meaning = DOC.split("| `schedule.kind`", 1)[1].split("|")[1]
    assert all(f"`{choice}`" in meaning for choice in kind.metadata["choices"])


def test_frozen_stages_1_freezes_the_first_out_norm_as_the_doc_says():
    assert "patch embed, stage 0 and out_norms.0: no gradients, eval" in DOC
    model = timm.create_model("swinlite_pico_patch2_window4_32", features_only=True, out_norm=True, frozen_stages=1)
    model.train()
    frozen = {name.rsplit(".", 1)[0] for name, p in model.model.out_norms.named_parameters() if not p.requires_grad}
    assert frozen == {"0"}
    assert not model.model.out_norms[0].training and model.model.out_norms[1].training
