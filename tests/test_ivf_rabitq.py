"""``ivf-rabitq``: lists probed as far as each query needs, candidates re-scored exactly from float32
rows read by row; its tuning, its files and what it refuses. (The round trip every kind passes is in
``tests/test_index_kinds.py``.)"""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from spacy_sapbert.index import VectorIndex, exact_top_k, recall_at_k
from spacy_sapbert.index_kinds.ivf_pq import NpyRows
from spacy_sapbert.index_kinds.ivf_rabitq import ROWS_FILE, IvfRabitqIndex, list_count, probed_lists
from spacy_sapbert.index_kinds.tuning import tune_probe_margin
from spacy_sapbert.registries import index_kinds


def _clustered(n: int, dim: int, seed: int, clusters: int = 40, spread: float = 0.35) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim)).astype(np.float32)
    data = centres[rng.integers(0, clusters, n)] + spread * rng.normal(size=(n, dim)).astype(np.float32)
    return data / np.linalg.norm(data, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def data():
    vectors = _clustered(6000, 32, seed=1)
    queries = vectors[:200] + 0.2 * _clustered(200, 32, seed=2)
    return vectors, queries / np.linalg.norm(queries, axis=1, keepdims=True)


def test_each_query_probes_the_lists_near_its_best_one():
    scores = np.array([[0.9, 0.85, 0.5, 0.79, 0.1], [0.3, 0.31, 0.29, 0.28, 0.27]], np.float32)
    lists, found = probed_lists(scores, margin=0.1, least=1, most=4)
    assert lists.tolist() == [[0, 1, -1, -1], [1, 0, 2, 3]]  # a peaked query: 2 lists; a flat one: the most, best first
    assert found[0].tolist() == pytest.approx([0.9, 0.85, 0.0, 0.0])  # (padding scores finite: fast-scan scales by them)
    assert probed_lists(scores, margin=0.0, least=3, most=4)[0][0].tolist() == [0, 1, 3, -1]  # at least `least`
    assert list_count(1_000_000) == 4096 and list_count(7_500_000) == 8192 and list_count(1000) == 31


def test_candidates_are_rescored_exactly_from_the_float32_rows(data, tmp_path):
    vectors, queries = data
    index = VectorIndex.build([vectors[:2500], vectors[2500:]], kind="ivf-rabitq")
    assert isinstance(index, IvfRabitqIndex) and index.meta["rerank"] == "fp32" and index.meta["codes"] == "RaBitQ"
    np.testing.assert_array_equal(index.stored_vectors([7, 4000]), vectors[[7, 4000]])  # the encoder's vectors, bit for bit
    scores, rows = index.search(queries, 5)
    exact = np.einsum("qkd,qd->qk", vectors[rows], queries)
    np.testing.assert_allclose(scores, exact, rtol=0, atol=1e-6)  # float32 inner products, not the codes' estimates
    assert (np.diff(scores, axis=1) <= 0).all()
    index.to_disk(tmp_path)
    mapped = VectorIndex.from_disk(tmp_path)
    assert isinstance(mapped.rerank[0], NpyRows) and mapped.rerank[0].dtype == np.float32  # read by row, never mapped whole
    np.testing.assert_array_equal(mapped.search(queries, 5)[1], rows)


def test_tuning_picks_the_smallest_margin_and_depth_reaching_the_target_and_saves_them(data, tmp_path):
    vectors, queries = data
    exact = exact_top_k([vectors], queries, 5)
    index = VectorIndex.build(vectors, kind="ivf-rabitq")
    index.meta["min_nprobe"] = 1
    index.set_probe_margin(0.0)
    narrow = recall_at_k(index.search(queries, 5)[1], exact)
    margin, recall = tune_probe_margin(index, queries, exact, target=0.99)
    assert recall >= 0.99 > narrow and index.meta["probe_margin"] == margin > 0.0
    assert index.meta["rerank_candidates"] in IvfRabitqIndex.rerank_choices
    assert recall_at_k(index.search(queries, 5)[1], exact) == recall
    index.to_disk(tmp_path)
    again = VectorIndex.from_disk(tmp_path)
    assert (again.meta["probe_margin"], again.meta["rerank_candidates"]) == (margin, index.meta["rerank_candidates"])
    assert recall_at_k(again.search(queries, 5)[1], exact) == recall


def test_a_mapped_index_pickles_as_its_folder(data, tmp_path):
    vectors, queries = data
    VectorIndex.build(vectors, kind="ivf-rabitq").to_disk(tmp_path)
    mapped = VectorIndex.from_disk(tmp_path)
    mapped.set_probe_margin(0.2)  # a setting changed after loading travels with the pickle
    pickled = pickle.dumps(mapped)
    assert len(pickled) < 5000  # the folder and the settings, not the codes or the rows
    again = pickle.loads(pickled)
    assert again.meta["probe_margin"] == 0.2
    np.testing.assert_array_equal(again.search(queries, 5)[1], mapped.search(queries, 5)[1])


def test_files_that_do_not_match_are_refused_with_one_line(data, tmp_path):
    vectors, _ = data
    VectorIndex.build(vectors, kind="ivf-rabitq").to_disk(tmp_path / "a")
    VectorIndex.build(vectors[::-1].copy(), kind="ivf-rabitq").to_disk(tmp_path / "b")
    (tmp_path / "a" / ROWS_FILE).write_bytes((tmp_path / "b" / ROWS_FILE).read_bytes())  # same shape, other rows
    with pytest.raises(ValueError, match=rf"a/{ROWS_FILE} holds other vectors than the index was built with: rebuild the index$"):
        VectorIndex.from_disk(tmp_path / "a")
    np.save(tmp_path / "a" / ROWS_FILE, vectors.astype(np.float16))
    with pytest.raises(ValueError, match=rf"{ROWS_FILE} holds float16, expected float32: rebuild the index"):
        VectorIndex.from_disk(tmp_path / "a")
    (tmp_path / "a" / ROWS_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=f"has no {ROWS_FILE}"):
        VectorIndex.from_disk(tmp_path / "a")
    meta = json.loads((tmp_path / "b" / "index.json").read_text())
    (tmp_path / "b" / "index.json").write_text(json.dumps({**meta, "codes": "RaBitQfs"}))
    with pytest.raises(ValueError, match="records 'RaBitQfs' codes, not the 'RaBitQ' of 'ivf-rabitq': rebuild the index"):
        VectorIndex.from_disk(tmp_path / "b")
    (tmp_path / "b" / "index.json").write_text(json.dumps({**meta, "kind": "ivf-pq"}))
    with pytest.raises(ValueError, match="holds a FAISS IndexIVFRaBitQ, not the 'ivf-pq' index"):
        VectorIndex.from_disk(tmp_path / "b")


class _FastScanRabitq(IvfRabitqIndex):
    """A subclass with other codes, as ``benchmarks/umls_scale.py`` registers its candidates."""

    codes = "RaBitQfs"
    faiss_class = "IndexIVFRaBitQFastScan"
    auto_names = None


def test_fast_scan_codes_are_packed_once_the_vectors_are_in(data, tmp_path):
    import faiss

    vectors, queries = data
    index_kinds.register("test-rabitq-fastscan")(_FastScanRabitq)
    try:
        index = VectorIndex.build(vectors, kind="test-rabitq-fastscan")
        assert not isinstance(index.index, faiss.IndexIVFFastScan)  # the plain form while vectors are added
        exact = exact_top_k([vectors], queries, 5)
        assert recall_at_k(index.search(queries, 5)[1], exact) >= 0.95
        assert isinstance(index.index, faiss.IndexIVFRaBitQFastScan)
        index.add(vectors[:10])  # FAISS assigns the lists of vectors added after packing
        index.to_disk(tmp_path)
        again = VectorIndex.from_disk(tmp_path)
        assert len(again) == 6010 and isinstance(again.index, faiss.IndexIVFRaBitQFastScan)
        np.testing.assert_array_equal(again.search(queries, 5)[1], index.search(queries, 5)[1])
    finally:
        import catalogue

        catalogue._remove((*index_kinds.namespace, "test-rabitq-fastscan"))  # (catalogue has no public way back)
