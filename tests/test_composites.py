"""Composite mentions: the runtime split (concept count unknown) and the evaluation's (count known)."""
from __future__ import annotations

import pytest

from spacy_sapbert.composites import split_composite, split_mention


@pytest.mark.parametrize(
    "mention, parts",
    [
        ("breast and ovarian cancer", ["breast cancer", "ovarian cancer"]),
        ("palmar and/or plantar pits", ["palmar pits", "plantar pits"]),
        ("cancers of the breast and ovary", ["cancers of breast", "cancers of ovary"]),
        ("breast/ovarian cancer", ["breast cancer", "ovarian cancer"]),
        ("breast cancer and ovarian cancer", ["breast cancer", "ovarian cancer"]),
        ("colorectal adenomas and carcinoma", ["colorectal adenomas", "colorectal carcinoma"]),
        ("type 1 and type 2 diabetes", ["type 1 diabetes", "type 2 diabetes"]),
        ("benign and malignant breast tumors", ["benign breast tumors", "malignant breast tumors"]),
        ("hemophilia A and B", ["hemophilia A", "hemophilia B"]),
        (
            "sporadic breast, brain, prostate and kidney cancer",
            ["sporadic breast cancer", "brain cancer", "prostate cancer", "kidney cancer"],
        ),
        ("retinal  and the pineal tumours", ["retinal tumours", "pineal tumours"]),  # spaces normalised
        # an adverb and its participle are one modifier
        ("low-set and posteriorly rotated ears", ["low-set ears", "posteriorly rotated ears"]),
        ("late and early onset disease", ["late onset disease", "early onset disease"]),
        # one-word modifiers joined by commas alone
        ("broad, flat nasal bridge", ["broad nasal bridge", "flat nasal bridge"]),
        ("short, broad, spade-like hands", ["short hands", "broad hands", "spade-like hands"]),
    ],
)
def test_coordinations_are_split(mention, parts):
    assert split_mention(mention) == parts


@pytest.mark.parametrize(
    "mention",
    [
        "diabetes mellitus",
        "pseudoxanthoma elasticum",
        "ataxia (gait and limb)",  # an "and" inside a gloss
        "and",
        "breast cancer and breast cancer",  # nothing new: kept whole
        "impaired memory, weight loss",  # commas alone between items of two words: a list, no shared words
        "seizures, ataxia",
        "",
    ],
)
def test_non_composites_stay_whole(mention):
    assert split_mention(mention) == [mention]


def test_one_concept_named_with_and_is_still_offered_as_parts():
    # the linker keeps the parts only when each links better than the whole name
    assert split_mention("hand, foot and mouth disease") == ["hand disease", "foot disease", "mouth disease"]


def test_evaluation_split_keeps_the_original_head_rule():
    # the evaluation's counts must not move: its rule takes the head after the last item's first word
    assert split_composite("type 1 and type 2 diabetes", 2) == ["type 1 2 diabetes", "type 2 diabetes"]
    assert split_composite("breast and ovarian cancer", 2) == ["breast cancer", "ovarian cancer"]
    assert split_composite("hemorrhagic cystitis", 2) == ["hemorrhagic", "cystitis"]
    assert split_mention("hemorrhagic cystitis") == ["hemorrhagic cystitis"]
