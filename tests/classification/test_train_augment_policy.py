"""data.auto_augment: a policy timm's parser would read only in part is refused, as one it refuses is."""

import pytest

from swinlite.classification.config import DataConfig
from swinlite.classification.data import check_augment


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        ("rand-m9-bogus", "timm would skip the section 'bogus': a section is a key and its number, e.g. m9"),
        ("augmix-m5-wide", "timm would skip the section 'wide'"),
        ("original-noise", "timm would skip the section 'noise'"),
        ("rand-m9-", "timm would skip the section ''"),
        ("rand-m9-tbogus", "the transform set 'tbogus' is none of tweights, t3aw, t3a: timm would use its default set"),
    ],
)
def test_sections_timm_skips_without_a_word_are_refused(policy: str, reason: str):
    """timm's parsers skip a section without a digit (and RandAugment's unknown transform set gives its default):
    rand-m9-bogus trained as rand-m9, where docs/training.md says a policy timm does not take is an error line."""
    with pytest.raises(ValueError) as refused:
        check_augment(DataConfig(auto_augment=policy))
    assert str(refused.value).startswith(f"data.auto_augment={policy} is not a policy timm knows ({reason}")


@pytest.mark.parametrize(
    "policy", ["rand-m9-mstd0.5-inc1", "rand-n3-p0.3-mmax12-tweights", "augmix-m5-w4-d2-a1.0-b1", "original-mstd0.5"]
)
def test_policies_timm_reads_whole_are_taken(policy: str):
    check_augment(DataConfig(auto_augment=policy))
