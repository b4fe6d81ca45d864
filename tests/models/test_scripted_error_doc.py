"""docs/models.md on bad input to a ``torch.jit.script``-ed model: the same check, raised as ``torch.jit.Error`` (not
a ``ValueError``, as the doc said), whose text ends with ``builtins.ValueError: expected ...``."""

from pathlib import Path

import pytest
import timm
import torch

import swinlite  # noqa: F401 (registers the models)

DOC = " ".join((Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text().split())


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")
def test_a_scripted_model_raises_the_check_as_the_doc_says():
    assert "raises `torch.jit.Error` (not a `ValueError`), whose text ends with `builtins.ValueError: expected" in DOC
    scripted = torch.jit.script(timm.create_model("swinlite_pico_patch2_window4_32").eval())
    with pytest.raises(torch.jit.Error) as error:
        scripted(torch.zeros(1, 4, 32, 32))
    assert not isinstance(error.value, ValueError)
    assert str(error.value).strip().splitlines()[-1].startswith("builtins.ValueError: expected a floating-point tensor")
