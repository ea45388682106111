"""Index kinds behind one interface: every registered kind round-trips (build, search, save, load
mapped, pickle); a kind from outside the package is one class plus a registration and works through
``build-kb --index`` and ``build_pipeline``; folders whose files do not match are refused.

Copy ``ToyIndex`` to start a new kind: a ``VectorIndex`` subclass implementing ``create``,
``add_vectors``, ``search_vectors``, ``save_files``, ``load``, ``dim`` and ``__len__`` (and
``stored_vectors`` where it keeps the vectors whole), registered with ``@index_kinds.register``.
"""
from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import pytest
from typer.testing import CliRunner

from spacy_sapbert.cli import app
from spacy_sapbert.fileio import atomic_open
from spacy_sapbert.index import VectorIndex
from spacy_sapbert.index_kinds import choose_kind, index_kind_help
from spacy_sapbert.registries import index_kinds, names
from spacy_sapbert.search import LinkingKB

TOY_FILE = "toy.vectors.npy"


@index_kinds.register("toy")
class ToyIndex(VectorIndex):
    """A third party's kind: brute force in numpy over its vectors, kept in one ``.npy``."""

    exact = True
    main_file = TOY_FILE

    def __init__(self, vectors: np.ndarray, meta: Dict[str, object]):
        super().__init__(meta)
        self.vectors = vectors

    @classmethod
    def create(cls, kind: str, chunks: Sequence[np.ndarray], dim: int, n: int, seed: int = 0,
               nprobe: Optional[int] = None) -> "ToyIndex":
        return cls(np.zeros((0, dim), np.float32), {"kind": kind, "dim": dim, "n": 0, "metric": "inner_product"})

    def add_vectors(self, vectors: np.ndarray) -> None:
        self.vectors = np.concatenate([self.vectors, np.asarray(vectors, dtype=np.float32)])

    def search_vectors(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        scores = queries @ self.vectors.T
        rows = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(scores, rows, 1), rows.astype(np.int64)

    def stored_vectors(self, rows: Sequence[int]) -> Optional[np.ndarray]:
        return np.array(self.vectors[np.asarray(rows, dtype=np.int64)], dtype=np.float32)

    def save_files(self, path: Path) -> None:
        with atomic_open(path / TOY_FILE, "wb") as f:
            np.save(f, self.vectors, allow_pickle=False)

    @classmethod
    def load(cls, path: Path, meta: Dict[str, object], mmap: bool) -> "ToyIndex":
        if not (path / TOY_FILE).is_file():
            raise FileNotFoundError(f"{path} has no {TOY_FILE}")
        return cls(np.load(path / TOY_FILE, mmap_mode="r" if mmap else None, allow_pickle=False), meta)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def __len__(self) -> int:
        return len(self.vectors)


BUILT_IN = ("flat", "flat-fp16", "sq8", "hnsw", "ivf-sq8", "ivf-fp16", "ivf-pq", "ivf-rabitq")
TABLE = (
    "concept_id\tcanonical_name\taliases\ttypes\n"
    "HP:1\tSeizure\tConvulsion|Fits\tT184\n"
    "HP:2\tHeadache\tCephalgia\tT184\n"
    "HP:3\tFever\tPyrexia\tT184\n"
)


def _unit_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(30, dim)).astype(np.float32)
    data = centres[rng.integers(0, 30, n)] + 0.3 * rng.normal(size=(n, dim)).astype(np.float32)
    return data / np.linalg.norm(data, axis=1, keepdims=True)


def _same(a: Tuple[np.ndarray, np.ndarray], b: Tuple[np.ndarray, np.ndarray]) -> bool:
    return bool(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]))


def test_every_old_kind_name_is_registered_and_listed_for_the_cli():
    registered = names(index_kinds)
    assert set(BUILT_IN) | {"toy"} <= set(registered)
    assert all(kind in index_kind_help() for kind in registered) and index_kind_help().startswith("auto (flat for up to 1,000,000")
    help_text = CliRunner().invoke(app, ["build-kb", "--help"], env={"COLUMNS": "400"}).output
    assert all(kind in help_text for kind in BUILT_IN)


@pytest.mark.parametrize("kind", names(index_kinds))
def test_every_registered_kind_round_trips(kind, tmp_path):
    data = _unit_vectors(3000, 16, seed=1)
    queries = data[:40] + 0.05 * _unit_vectors(40, 16, seed=2)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    index = VectorIndex.build([data[:1000], data[1000:]], kind=kind)
    assert (index.meta["kind"], len(index), index.dim, index.meta["n"]) == (kind, 3000, 16, 3000)
    assert index.describe().startswith(f"{kind}: 3,000 vectors of 16 dimensions")
    found = index.search(queries, 5)
    assert found[0].shape == found[1].shape == (40, 5) and found[1].dtype == np.int64
    exact = np.argsort(-(queries.astype(np.float64) @ data.astype(np.float64).T), axis=1, kind="stable")[:, :5]
    if index.exact:
        np.testing.assert_array_equal(found[1], exact)
        np.testing.assert_allclose(found[0], np.take_along_axis(queries @ data.T, exact, 1), atol=1e-6)
    else:
        assert np.mean([len(set(a) & set(b)) / 5 for a, b in zip(found[1], exact)]) >= 0.8
    assert _same(pickle.loads(pickle.dumps(index)).search(queries, 5), found)  # in memory: pickled by value
    stored = index.stored_vectors([3, 0])
    assert stored is None or np.allclose(stored, data[[3, 0]], atol=1e-3)

    index.to_disk(tmp_path / "idx")
    mapped = VectorIndex.from_disk(tmp_path / "idx")
    read = VectorIndex.from_disk(tmp_path / "idx", mmap=False)
    assert type(mapped) is type(index) is type(read) and mapped.meta == index.meta
    again = mapped.search(queries, 5)
    assert _same(again, read.search(queries, 5))
    assert _same(pickle.loads(pickle.dumps(mapped)).search(queries, 5), again)  # mapped: pickled as its folder
    if index.exact:
        assert _same(again, found)
    assert mapped.search(np.zeros((0, 16), np.float32), 5)[1].shape == (0, 5)
    with pytest.raises(ValueError, match=r"queries must have shape \(n, 16\)"):
        mapped.search(np.zeros((2, 8), np.float32), 5)


def test_auto_asks_the_registry_and_says_why(monkeypatch):
    kind, why = choose_kind(72_000)
    assert kind == "flat" and why.startswith("auto: 72,000 names, flat for up to 1,000,000 names")
    kind, why = choose_kind(1_000_001)
    assert kind == "ivf-rabitq" and why.startswith("auto: 1,000,001 names, ivf-rabitq for over 1,000,000 names: RaBitQ codes")
    built = VectorIndex.build(_unit_vectors(20, 8, seed=3))
    assert built.meta["auto"].startswith("auto: 20 names, flat") and "; auto: 20 names" in built.describe()
    assert "auto" not in VectorIndex.build(_unit_vectors(20, 8, seed=3), kind="flat").meta  # named: nothing to explain
    monkeypatch.setattr(ToyIndex, "auto_names", (10, 50))  # a range that starts higher than flat's wins inside it
    monkeypatch.setattr(ToyIndex, "auto_reason", "small enough for numpy")
    assert choose_kind(20) == ("toy", "auto: 20 names, toy for 10 to 50 names: small enough for numpy")
    assert choose_kind(51)[0] == "flat"
    assert isinstance(VectorIndex.build(_unit_vectors(20, 8, seed=3)), ToyIndex)


def _build_kb(tmp_path: Path, tiny_bert_path: Path, *extra: str):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "terms.tsv").write_text(TABLE, encoding="utf8")
    args = ["build-kb", str(tmp_path / "terms.tsv"), str(tmp_path / "kb"), "--encoder", str(tiny_bert_path), *extra]
    return CliRunner().invoke(app, args)


def _links(kb: Path, tiny_bert_path: Path) -> list:
    from spacy_sapbert.pipelines import build_pipeline

    nlp = build_pipeline(kb, "gold", encoder=tiny_bert_path, linker_config={"precision": "fp32"})
    doc = nlp.make_doc("Fits and pyrexia; no cephalgia or convulsions.")
    doc.ents = [doc.char_span(0, 4, "X"), doc.char_span(9, 16, "X"), doc.char_span(21, 30, "X"), doc.char_span(34, 45, "X")]
    doc = nlp(doc)
    linker = nlp.get_pipe("sapbert_linker")
    assert type(linker.linking_kb.index).__name__ == ("ToyIndex" if kb.parent.name == "toy" else "FlatIndex")
    candidates = [e._.cui_candidates for e in doc.ents]  # (concept, name, score, ambiguous), best first
    return [(e.text, e.kb_id_) for e in doc.ents], [[c[0] for c in cs] for cs in candidates], [float(c[2]) for cs in candidates for c in cs]


def test_a_kind_registered_outside_the_package_builds_and_links_end_to_end(tmp_path, tiny_bert_path):
    result = _build_kb(tmp_path / "toy", tiny_bert_path, "--index", "toy")
    assert result.exit_code == 0, result.output
    kb = tmp_path / "toy" / "kb"
    assert json.loads((kb / "index.json").read_text())["kind"] == "toy"
    assert (kb / TOY_FILE).is_file() and not (kb / "index.faiss").exists()
    assert isinstance(LinkingKB.from_disk(kb).index, ToyIndex)
    assert _build_kb(tmp_path / "flat", tiny_bert_path, "--index", "flat").exit_code == 0
    toy_links, flat_links = _links(kb, tiny_bert_path), _links(tmp_path / "flat" / "kb", tiny_bert_path)
    assert toy_links[0][:3] == [("Fits", "HP:1"), ("pyrexia", "HP:3"), ("cephalgia", "HP:2")]
    assert toy_links[:2] == flat_links[:2]  # the same links and candidates as the exact FAISS-backed kind
    np.testing.assert_allclose(toy_links[2], flat_links[2], atol=1e-5)


def test_an_unknown_kind_is_refused_before_the_build(tmp_path, tiny_bert_path):
    result = _build_kb(tmp_path, tiny_bert_path, "--index", "nope")
    assert result.exit_code == 1
    assert "unknown index kind 'nope'; choose one of" in result.output and "ivf-pq" in result.output
    assert not (tmp_path / "kb").exists() and not (tmp_path / "kb.partial").exists()


def test_index_files_that_do_not_match_are_refused(tmp_path, tiny_encoder):
    from spacy_sapbert.records import ConceptRecord as R

    records = [R("D1", "Asthma", ["bronchial asthma"]), R("D2", "Fever", ["pyrexia"])]
    LinkingKB.build(records, tiny_encoder).to_disk(tmp_path / "kb")
    LinkingKB.build(records + [R("D3", "Headache", [])], tiny_encoder).to_disk(tmp_path / "bigger")
    (tmp_path / "kb" / "index.faiss").write_bytes((tmp_path / "bigger" / "index.faiss").read_bytes())
    with pytest.raises(ValueError, match=r"kb/index.faiss does not match index.json \(n/dim differ\): rebuild the index"):
        LinkingKB.from_disk(tmp_path / "kb")

    VectorIndex.build(tiny_encoder.encode(["asthma", "fever"]), kind="sq8").to_disk(tmp_path / "other")
    meta = json.loads((tmp_path / "other" / "index.json").read_text())
    (tmp_path / "other" / "index.json").write_text(json.dumps({**meta, "kind": "hnsw"}))
    with pytest.raises(ValueError, match="holds a FAISS IndexScalarQuantizer, not the 'hnsw' index its index.json names"):
        VectorIndex.from_disk(tmp_path / "other")
    (tmp_path / "other" / "index.json").write_text(json.dumps({**meta, "kind": "annoy"}))
    with pytest.raises(ValueError, match="index.json: unknown index kind 'annoy'; choose one of"):
        VectorIndex.from_disk(tmp_path / "other")

    toy = VectorIndex.build(tiny_encoder.encode(["asthma", "fever"]), kind="toy")
    toy.to_disk(tmp_path / "toy")
    np.save(tmp_path / "toy" / TOY_FILE, np.zeros((5, toy.dim), np.float32))
    with pytest.raises(ValueError, match=f"toy/{TOY_FILE} does not match index.json"):
        VectorIndex.from_disk(tmp_path / "toy")
    (tmp_path / "toy" / "index.json").unlink()
    with pytest.raises(FileNotFoundError, match="has no index.json"):
        VectorIndex.from_disk(tmp_path / "toy")


def test_info_shows_why_auto_picked_the_kind(tmp_path, tiny_bert_path):
    assert _build_kb(tmp_path, tiny_bert_path).exit_code == 0  # --index auto
    info = CliRunner().invoke(app, ["info", str(tmp_path / "kb")])
    index_meta = json.loads(info.stdout)[str(tmp_path / "kb")]["index"]
    assert index_meta["kind"] == "flat" and index_meta["auto"].startswith("auto: 7 names, flat for up to 1,000,000 names")


def test_a_detector_and_an_index_kind_from_outside_the_package_work_together(tmp_path, tiny_bert_path):
    """Both extension points at once, as a third-party package would use them: ``build-kb --index toy``,
    then ``build_pipeline`` with a detector registered here (an exact-word ruler), linking through the toy kind."""
    import catalogue
    from spacy.language import Language

    from spacy_sapbert.detectors import DetectorContext
    from spacy_sapbert.pipelines import build_pipeline
    from spacy_sapbert.registries import detectors

    @detectors.register("test_toy_words")
    def toy_words(nlp: Language, context: DetectorContext) -> Language:
        ruler = nlp.add_pipe("entity_ruler", name="toy_words")
        label = context.span_label("test_toy_words")
        ruler.add_patterns([{"label": label, "pattern": [{"LOWER": w}]} for w in ("fits", "pyrexia")])  # type: ignore[attr-defined]
        return nlp

    try:
        assert _build_kb(tmp_path, tiny_bert_path, "--index", "toy").exit_code == 0
        nlp = build_pipeline(tmp_path / "kb", "test_toy_words", encoder=tiny_bert_path, linker_config={"precision": "fp32"})
        assert nlp.pipe_names[0] == "toy_words"
        doc = nlp("Fits and pyrexia.")
        assert isinstance(nlp.get_pipe("sapbert_linker").linking_kb.index, ToyIndex)
        assert [(e.text, e.kb_id_) for e in doc.ents] == [("Fits", "HP:1"), ("pyrexia", "HP:3")]
    finally:
        catalogue._remove((*detectors.namespace, "test_toy_words"))  # (catalogue has no public way back)
