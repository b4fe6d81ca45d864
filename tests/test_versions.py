"""An older torch or timm than pyproject.toml's floors is one ImportError at ``import swinlite`` naming it."""

import re
import tomllib
from pathlib import Path

import pytest

from swinlite.versions import LOWEST, check_versions


def test_an_older_torch_or_timm_is_named_in_one_import_error():
    with pytest.raises(ImportError, match=r"needs newer packages: torch 2\.6\.0\+cu124 \(needs >= 2\.11\);"):
        check_versions({"torch": "2.6.0+cu124", "timm": "1.0.31"})
    with pytest.raises(ImportError, match=r"torch 2\.10\.1 \(needs >= 2\.11\), timm 1\.0\.30 \(needs >= 1\.0\.31\)"):
        check_versions({"torch": "2.10.1", "timm": "1.0.30"})
    check_versions({"torch": "2.11.0+cu130", "timm": "1.0.31"})  # the floors themselves
    check_versions({"torch": "2.15.0.dev20270101", "timm": "1.1.0"})


def test_the_floors_are_pyprojects():
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    floors = dict(re.fullmatch(r"([A-Za-z_]+)>=([\d.]+)", d).groups() for d in project["dependencies"])
    assert {name: floors[name] for name in LOWEST} == {n: ".".join(map(str, v)) for n, v in LOWEST.items()}
