"""Loading a KB folder checks its arrays, so damage is reported at load time, naming the file
(issue 13, item 6), instead of wrong answers or an IndexError at query time."""
from __future__ import annotations

import numpy as np
import pytest

from spacy_sapbert.kb import ConceptKB
from spacy_sapbert.records import ConceptRecord
from spacy_sapbert.strings import first_decrease


def saved_kb(tmp_path):
    records = [
        ConceptRecord("C1", "fever", ["pyrexia", "high temperature"], types=["T184"]),
        ConceptRecord("C2", "seizure", ["fits", "convulsion"], types=["T184", "T047"]),
        ConceptRecord("C3", "ms", ["multiple sclerosis"], types=["T047"]),
        ConceptRecord("C4", "mitral stenosis", ["ms"]),
    ]
    folder = tmp_path / "kb"
    ConceptKB.from_records(records).to_disk(folder)
    return folder


def tamper(path, change):
    arr = np.load(path, allow_pickle=False)
    arr = change(arr.copy())
    np.save(path, arr, allow_pickle=False)


def test_a_saved_kb_passes_its_checks(tmp_path):
    kb = ConceptKB.from_disk(saved_kb(tmp_path))
    assert kb.stats()["ambiguous_names"] == 1 and len(kb) == 4


@pytest.mark.parametrize(
    "file,change,problem",
    [
        ("name_concepts.npy", lambda a: np.where(a == a.max(), 4, a).astype(a.dtype), "concept row 4 at entry"),
        ("name_concepts.npy", lambda a: np.concatenate([[-1], a[1:]]).astype(a.dtype), "concept row -1 at entry 0"),
        ("name_offsets.npy", lambda a: np.concatenate([a[:2], [a[3], a[2]], a[4:]]).astype(a.dtype), "never decrease"),
        ("name_offsets.npy", lambda a: np.concatenate([[1], a[1:]]).astype(a.dtype), "must start at 0"),
        ("name_offsets.npy", lambda a: a.astype(np.float64), "must hold integers"),
        ("names.starts.npy", lambda a: np.concatenate([a[:2], [a[3], a[2]], a[4:]]).astype(a.dtype), "must increase"),
        ("concept_types.rows.npy", lambda a: np.concatenate([a[:1], [a[2], a[1]], a[3:]]).astype(a.dtype), "must not decrease"),
    ],
    ids=["concept-too-big", "concept-negative", "offsets-swapped", "offsets-start", "offsets-float", "starts-swapped", "rows-swapped"],
)
def test_damaged_arrays_are_refused_at_load_naming_the_file(tmp_path, file, change, problem):
    folder = saved_kb(tmp_path)
    tamper(folder / file, change)
    with pytest.raises(ValueError) as err:
        ConceptKB.from_disk(folder)
    assert file in str(err.value) and problem in str(err.value)


def test_first_decrease_finds_the_first_step_back_across_chunks(monkeypatch):
    import spacy_sapbert.strings as strings

    monkeypatch.setattr(strings, "_CHECK_CHUNK", 7)  # a step back on a chunk border is still seen
    arr = np.arange(50, dtype=np.int64)
    assert first_decrease(arr) is None and first_decrease(arr, strict=True) is None
    arr[21] = 19
    assert first_decrease(arr) == 20
    flat = np.array([0, 1, 1, 2], dtype=np.int64)
    assert first_decrease(flat) is None and first_decrease(flat, strict=True) == 1
