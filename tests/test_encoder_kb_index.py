"""Encoder, concept KB, vector index and the linking KB folder."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from spacy_sapbert import encoder as encoder_module
from spacy_sapbert.encoder import SapEncoder, resolve_encoder_path, resolve_precision
from spacy_sapbert.index import NpyRows, VectorIndex, exact_top_k, recall_at_k, tune_nprobe
from spacy_sapbert.index_kinds.flat import FlatIndex
from spacy_sapbert.kb import ConceptKB, DuplicateConceptError
from spacy_sapbert.records import ConceptRecord as R
from spacy_sapbert.search import EncoderMismatchError, LinkingKB

RECORDS = [
    R("D1", "Diabetes mellitus", ["diabetes", "DM"]),
    R("D2", "Myocardial infarction", ["heart attack", "MI"]),
    R("D3", "Mitral insufficiency", ["MI", "mitral regurgitation"]),
    R("D4", "Asthma", ["bronchial asthma"]),
]


def test_encoder_outputs_unit_vectors_in_input_order(tiny_encoder):
    texts = ["asthma", "heart attack", "diabetes mellitus type 2", "asthma"]
    vecs = tiny_encoder.encode(texts, batch_size=2)
    assert vecs.shape == (4, tiny_encoder.dim) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(vecs[0], vecs[3], atol=1e-6)  # order restored after length sorting
    single = tiny_encoder.encode(["heart attack"])
    np.testing.assert_allclose(single[0], vecs[1], atol=1e-5)  # dynamic padding does not change vectors


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_names_vector_does_not_depend_on_what_else_is_encoded(tiny_bert_path, precision):
    """With fixed passes (``pass_rows``, as annotate encodes), bit for bit: alone, among others, in other
    batch sizes (what --n-process, resume and a cluster need)."""
    from spacy_sapbert.encoder import SapEncoder, native_bf16

    if precision == "bf16" and not native_bf16(torch.device("cpu")):
        pytest.skip("bf16 is emulated on this CPU; the encoder's auto precision keeps fp32 here")
    encoder = SapEncoder.load(tiny_bert_path, device="cpu", precision=precision)
    names = ["breast cancer", "iron deficiency anemia", "fever", "renal failure disease syndrome", "asthma", "cancer"]
    packed = encoder.encode(names, batch_size=4)  # passes of mixed widths: equal to within rounding only
    encoder.pass_rows = 4
    together = encoder.encode(names, batch_size=4)
    for i, name in enumerate(names):
        assert (encoder.encode([name])[0] == together[i]).all(), name
    assert (encoder.encode(names[::-1], batch_size=2)[::-1] == together).all()
    np.testing.assert_allclose(packed, together, atol=2e-6 if precision == "fp32" else 2e-2)
    assert encoder.pad_width(5, 9) == 8 and encoder.pad_width(8, 9) == 8


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_with_fixed_passes_minilms_vectors_do_not_depend_on_the_batch(precision):
    """The shipped MiniLM, as annotate runs it (``pass_rows``): bit for bit the same vector alone or among
    others. Without fixed passes its matrix kernels, chosen by the size of the product, move some rows'
    last bits (benchmarks/batch_invariance.py); the tiny test model is too small to show that."""
    from spacy_sapbert.encoder import fixed_passes, native_bf16
    from spacy_sapbert.shards import ENCODER_PASS_ROWS

    if precision == "bf16" and not native_bf16(torch.device("cpu")):
        pytest.skip("bf16 is emulated on this CPU; the encoder's auto precision keeps fp32 here")
    encoder = SapEncoder.load(None, device="cpu", precision=precision)
    encoder.pass_rows = ENCODER_PASS_ROWS
    words = "renal failure breast cancer iron deficiency anemia acute myeloid leukemia of the left ventricle".split()
    rng = np.random.default_rng(0)
    names = list(dict.fromkeys(" ".join(rng.choice(words, size=rng.integers(1, 6))) for _ in range(400)))
    together = encoder.encode(names)
    for size in (1, 3, 7, 50):
        for start in range(0, 50, size):
            assert (encoder.encode(names[start : start + size]) == together[start : start + size]).all(), (size, start)
    batch = {"input_ids": torch.arange(6).reshape(3, 2)}
    assert fixed_passes(batch, 5)["input_ids"].tolist() == [[0, 1], [2, 3], [4, 5], [4, 5], [4, 5]]
    assert fixed_passes(batch, None) is batch
    with pytest.raises(ValueError):
        fixed_passes(batch, 2)


def test_encoder_truncates_long_names_and_handles_empty_input(tiny_encoder):
    long = " ".join(["insulin dependent diabetes"] * 40)
    batch = tiny_encoder.tokenize([long])
    assert batch["input_ids"].shape[1] == tiny_encoder.settings.max_length
    assert tiny_encoder.encode([long]).shape == (1, tiny_encoder.dim)
    assert tiny_encoder.encode([]).shape == (0, tiny_encoder.dim)


def test_pooling_changes_vectors_and_fingerprint(tiny_bert_path):
    cls_enc = SapEncoder.load(tiny_bert_path, device="cpu")
    mean_enc = SapEncoder.load(tiny_bert_path, pooling="mean", device="cpu")
    assert cls_enc.fingerprint != mean_enc.fingerprint
    a, b = cls_enc.encode(["heart attack"]), mean_enc.encode(["heart attack"])
    assert not np.allclose(a, b)


def test_encoder_save_load_round_trip(tiny_bert_path, tmp_path):
    enc = SapEncoder.load(tiny_bert_path, pooling="mean", max_length=16, device="cpu")
    enc.save(tmp_path / "enc")
    again = SapEncoder.load(tmp_path / "enc", device="cpu")
    assert again.settings == enc.settings and again.fingerprint == enc.fingerprint
    np.testing.assert_allclose(again.encode(["asthma"]), enc.encode(["asthma"]), atol=1e-6)


def test_reduced_precisions_stay_close_to_fp32(tiny_bert_path):
    ref = SapEncoder.load(tiny_bert_path, device="cpu", precision="fp32").encode(["heart attack", "asthma"])
    for precision in ("bf16", "int8"):
        out = SapEncoder.load(tiny_bert_path, device="cpu", precision=precision).encode(["heart attack", "asthma"])
        assert (out * ref).sum(1).min() > 0.95, precision


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_reduced_precision_copy_follows_in_place_weight_updates(tiny_bert_path, precision):
    """Training changes the weights in place between the encodings that plan its batches."""
    names = ["heart attack", "asthma", "chronic kidney disease"]
    encoder = SapEncoder.load(tiny_bert_path, device="cpu", precision=precision)
    before = encoder.encode(names)
    with torch.no_grad():
        for p in encoder.model.encoder.parameters():
            p.mul_(1.5)
    after = encoder.encode(names)
    ref = SapEncoder(encoder.model, encoder.tokenizer, encoder.settings, device="cpu", precision="fp32").encode(names)
    assert (after * ref).sum(1).min() > 0.95 and (before * ref).sum(1).min() < (after * ref).sum(1).min()
    assert encoder.model.dtype == torch.float32  # the reduced copy is separate from the trained weights


def test_auto_precision_is_bf16_only_where_it_is_faster(tiny_bert_path, monkeypatch):
    cpu = torch.device("cpu")
    for fast, expected in ((True, "bf16"), (False, "fp32")):
        monkeypatch.setattr(encoder_module, "fast_bf16", lambda device, fast=fast: fast)
        assert resolve_precision("auto", cpu) == expected
        assert SapEncoder.load(tiny_bert_path, device="cpu").precision == expected  # auto is the default
    assert resolve_precision("int8", cpu) == "int8"  # an explicit choice is kept
    with pytest.raises(ValueError, match="precision must be one of"):
        resolve_precision("fp8", cpu)


def test_training_auto_precision_is_bf16_on_a_cpu_only_where_it_is_faster(monkeypatch):
    """The trainer's autocast is bf16 on the CPU only where bf16 is faster (AMX, or AMD with AVX512-BF16),
    and the authors' fp16 on CUDA; an explicit choice is kept."""
    cpu = torch.device("cpu")
    for fast, expected in ((True, "bf16"), (False, "fp32")):
        monkeypatch.setattr(encoder_module, "fast_bf16", lambda device, fast=fast: fast)
        assert resolve_precision("auto", cpu, training=True) == expected
        assert resolve_precision("bf16", cpu, training=True) == "bf16"
    assert resolve_precision("auto", torch.device("cuda"), training=True) == "fp16"
    with pytest.raises(ValueError, match="fp16 autocast needs CUDA"):
        resolve_precision("fp16", cpu, training=True)
    with pytest.raises(ValueError, match="precision must be one of"):
        resolve_precision("int8", cpu, training=True)


def test_bf16_counts_as_faster_with_amx_or_on_amd(monkeypatch):
    """On Intel, AVX512-BF16 without AMX computes bf16 natively, yet slower than fp32: fp32 stays the
    choice there. On AMD, MKL's fp32 GEMMs run AVX2 kernels while oneDNN's bf16 runs at full width:
    bf16 is the choice wherever it is native, for inference and training."""
    from spacy_sapbert import machine

    cpu = torch.device("cpu")
    cases = (
        ("GenuineIntel", True, True, True), ("GenuineIntel", False, True, False), ("GenuineIntel", True, False, False),
        ("AuthenticAMD", False, True, True), ("AuthenticAMD", False, False, False), (None, False, True, False),
    )
    for vendor, amx, native, expected in cases:
        monkeypatch.setattr(machine, "cpu_vendor", lambda vendor=vendor: vendor)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda amx=amx: amx, raising=False)
        monkeypatch.setattr(encoder_module, "native_bf16", lambda device, native=native: native)
        assert encoder_module.fast_bf16(cpu) is expected, (vendor, amx, native)
        assert resolve_precision("auto", cpu) == ("bf16" if expected else "fp32")
        assert resolve_precision("auto", cpu, training=True) == ("bf16" if expected else "fp32")
    monkeypatch.setattr(machine, "cpu_vendor", lambda: "GenuineIntel")
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported", raising=False)  # a torch that cannot tell
    assert encoder_module.fast_bf16(cpu) is False


def test_bf16_is_not_faster_where_onednn_is_capped_below_amx(monkeypatch):
    """``--isa avx512`` or ``avx2`` (ONEDNN_MAX_CPU_ISA) on an AMX CPU: oneDNN may not use the tiles
    that torch's CPU check still sees, so ``auto`` keeps fp32 as that CPU would."""
    from spacy_sapbert import machine
    from spacy_sapbert.machine import ISA_ENVIRONMENTS

    cpu = torch.device("cpu")
    monkeypatch.setattr(machine, "cpu_vendor", lambda: "GenuineIntel")  # an Intel AMX CPU (AMD: the test above)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    monkeypatch.setattr(encoder_module, "native_bf16", lambda device: True)
    for cap, expected in ((None, True), ("AVX512_CORE_AMX", True), (ISA_ENVIRONMENTS["avx512"]["ONEDNN_MAX_CPU_ISA"], False),
                          (ISA_ENVIRONMENTS["avx2"]["ONEDNN_MAX_CPU_ISA"], False)):
        if cap is None:
            monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
        else:
            monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
        assert encoder_module.fast_bf16(cpu) is expected, cap
        assert resolve_precision("auto", cpu) == ("bf16" if expected else "fp32")


def test_missing_encoder_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="never downloads"):
        resolve_encoder_path(tmp_path / "nope")


def test_kb_keeps_one_row_per_name_with_all_its_concepts():
    kb = ConceptKB.from_records(RECORDS)
    row = kb.row_of_name("  mi ")
    assert row is not None
    assert sorted(kb.concept_ids[c] for c in kb.concepts_of_name(row)) == ["D2", "D3"]
    assert kb.stats() == {"concepts": 4, "names": 10, "ambiguous_names": 1, "name_concept_links": 11}
    assert kb.names_of_concept("D2") == ["Myocardial infarction", "heart attack", "MI"]


def test_a_name_spelt_another_way_finds_its_row_unless_its_words_name_other_concepts_too():
    kb = ConceptKB.from_records(RECORDS + [R("D5", "Renal tumor", ["Renal tumors", "Tumor of kidney"]), R("D6", "AIDS"), R("D7", "Aid")])
    row = kb.row_of_name
    assert kb.row_of_variant("Renal tumours") == row("renal tumor")  # both names are D5's: the first
    assert kb.row_of_variant("tumours of  kidney") == row("tumor of kidney")
    assert kb.row_of_variant("Diabetes-mellitus") == row("diabetes mellitus")
    assert kb.row_of_variant("AIDs.") is None  # "aids" and "aid" have the same words: two concepts
    assert kb.row_of_variant("renal tumor growth") is None and kb.row_of_variant("") is None
    assert ConceptKB.from_records([R("P", "+", ["Positive"])]).row_of_variant("(-)") is None  # no words, no match
    assert ConceptKB.from_records(RECORDS, lowercase=False).row_of_variant("diabetes-mellitus") is None  # case kept: no guessing


def test_a_hyphen_inside_a_word_is_a_spelling():
    kb = ConceptKB.from_records([R("H1", "Preauricular pit"), R("H2", "Up-slanting palpebral fissures"), R("H3", "Low-set ears"),
                                 R("H4", "Lowset ears"), R("H5", "Co-operation"), R("H6", "Cooperation")])
    row = kb.row_of_name
    assert kb.row_of_variant("pre-auricular pits") == row("preauricular pit")  # the text writes it apart
    assert kb.row_of_variant("upslanting palpebral fissures") == row("up-slanting palpebral fissures")  # the name does
    assert kb.row_of_variant("low-set ears") == row("low-set ears")  # a name as written wins over another written closed
    assert kb.row_of_variant("co-operation") == row("co-operation") and kb.row_of_variant("cooperation") == row("cooperation")
    assert kb.row_of_variant("pre - auricular pit") is None  # a hyphen between words is no spelling


def test_an_ambiguous_names_concepts_come_likeliest_first(tmp_path):
    """Priors decide first, then the number of names, then record order (D2 and D3 share "MI")."""
    row = lambda kb: kb.row_of_name("MI")  # noqa: E731
    first = lambda kb: [kb.concept_ids[c] for c in kb.concepts_of_name(row(kb))]  # noqa: E731
    tie = ConceptKB.from_records(RECORDS)
    assert first(tie) == ["D2", "D3"]  # three names each: record order
    fuller = ConceptKB.from_records(RECORDS[:2] + [R("D3", "Mitral insufficiency", ["MI", "mitral regurgitation", "MR"])])
    assert first(fuller) == ["D3", "D2"]  # four names beat three
    prior = ConceptKB.from_records(RECORDS[:2] + [R("D3", "Mitral insufficiency", ["MI", "mitral regurgitation", "MR"])], priors={"D2": 5})
    assert first(prior) == ["D2", "D3"]
    assert prior.fingerprint != fuller.fingerprint  # priors change the answers, so the fingerprint
    prior.to_disk(tmp_path / "kb")
    again = ConceptKB.from_disk(tmp_path / "kb")
    assert first(again) == ["D2", "D3"] and again.fingerprint == prior.fingerprint
    fuller.to_disk(tmp_path / "kb")  # saving without priors removes the old file
    assert not (tmp_path / "kb" / "concept_priors.npy").exists() and first(ConceptKB.from_disk(tmp_path / "kb")) == ["D3", "D2"]


def test_a_concepts_preferred_name_outranks_anothers_synonym():
    """MeSH: "(-)-Ketamine", an entry term of Esketamine, is "ketamine" once punctuation is
    stripped, and Esketamine has more names; Ketamine's own name still means Ketamine first,
    unless priors say otherwise."""
    records = [R("C1", "Esketamine", ["S-Ketamine", "(-)-Ketamine", "Kataved"]), R("D1", "Ketamine")]
    first = lambda kb: [kb.concept_ids[c] for c in kb.concepts_of_name(kb.row_of_name("ketamine"))]  # noqa: E731
    assert first(ConceptKB.from_records(records, strip_punctuation=True)) == ["D1", "C1"]
    assert first(ConceptKB.from_records(records, strip_punctuation=True, priors={"C1": 1})) == ["C1", "D1"]
    both = ConceptKB.from_records([R("B", "Aniridia"), R("A", "Aniridia", ["Congenital aniridia"])])  # preferred by both
    assert [both.concept_ids[c] for c in both.concepts_of_name(both.row_of_name("aniridia"))] == ["A", "B"]  # most names


MURMURS = [R("HP:1", "Heart murmur"), R("HP:2", "Systolic heart murmur", parents=["HP:1"]),
           R("HP:3", "Late systolic murmur", parents=["HP:2"]), R("HP:4", "Midsystolic murmur", parents=["HP:2"])]


def test_a_broader_concept_goes_first_when_the_mention_lacks_the_subtypes_words(tiny_encoder, monkeypatch):

    linking = LinkingKB.build(MURMURS, tiny_encoder)
    kb = linking.kb
    rows = {name: kb.row_of_name(name) for name in ("heart murmur", "systolic heart murmur", "late systolic murmur", "midsystolic murmur")}

    def search(scores):  # the index answers these scores, best first
        names = sorted(scores, key=lambda n: -scores[n])
        return lambda vectors, k, name_rows=None: (np.array([[scores[n] for n in names]]), np.array([[rows[n] for n in names]]))

    def ranked(query, scores, top_k=5):
        monkeypatch.setattr(linking, "search_names", search(scores))
        return [c.concept_id for c in linking.candidates(np.zeros((1, tiny_encoder.dim), np.float32), top_k=top_k, queries=[query])[0]]

    close = {"late systolic murmur": 0.977, "systolic heart murmur": 0.963, "midsystolic murmur": 0.93, "heart murmur": 0.9}
    assert ranked("systolic murmur", close)[:2] == ["HP:2", "HP:3"]  # "late" is not said: the parent
    assert ranked("systolic murmur", close, top_k=1) == ["HP:2"]  # though second by score, beyond a top 1
    assert ranked("late systolic murmur", {**close, "late systolic murmur": 1.0})[0] == "HP:3"  # said: the subtype
    assert ranked("systolic murmur", {**close, "systolic heart murmur": 0.94})[0] == "HP:3"  # the parent is too far
    assert ranked("midsystolic", {**close, "midsystolic murmur": 0.99})[0] == "HP:4"  # no ancestor holds "midsystolic"
    flat = LinkingKB.build([R(r.id, r.name) for r in MURMURS], tiny_encoder)  # no hierarchy: by score
    monkeypatch.setattr(flat, "search_names", search(close))
    assert flat.candidates(np.zeros((1, tiny_encoder.dim), np.float32), queries=["systolic murmur"])[0][0].concept_id == "HP:3"


def test_bad_priors_are_refused():
    with pytest.raises(ValueError, match="'D9', which is not a concept"):
        ConceptKB.from_records(RECORDS, priors={"D9": 1.0})
    with pytest.raises(ValueError, match="'D1' is -1"):
        ConceptKB.from_records(RECORDS, priors={"D1": -1})


def test_kb_duplicate_ids_error_or_merge():
    dup = RECORDS + [R("D4", "Asthma", ["reactive airway disease"], types=["T047"])]
    with pytest.raises(DuplicateConceptError, match="'D4'"):
        ConceptKB.from_records(dup)
    kb = ConceptKB.from_records(dup, on_duplicate="merge")
    assert len(kb) == 4
    assert "reactive airway disease" in kb.names_of_concept("D4")
    assert kb.concept_types[kb.row_of_concept("D4")] == ["T047"]


def test_kb_ignores_blank_names_and_round_trips(tmp_path):
    kb = ConceptKB.from_records([R("X1", "Fièvre", ["   ", "pyrexie"]), *RECORDS])
    assert "" not in kb.names and "fièvre" in kb.names
    kb.to_disk(tmp_path / "kb")
    again = ConceptKB.from_disk(tmp_path / "kb")
    assert again.fingerprint == kb.fingerprint
    assert again.names == kb.names and again.display_names == kb.display_names
    assert [r.to_dict() for r in again.records()] == [r.to_dict() for r in kb.records()]


def test_empty_kb_builds_and_searches(tiny_encoder):
    lkb = LinkingKB.build([], tiny_encoder)
    assert len(lkb.kb) == 0
    assert lkb.link(tiny_encoder, ["asthma", ""]) == [[], []]


def test_flat_index_matches_brute_force():
    rng = np.random.default_rng(0)
    data = rng.normal(size=(500, 16)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    queries = data[:20] + 0.1 * rng.normal(size=(20, 16)).astype(np.float32)
    index = VectorIndex.build(data, kind="flat")
    scores, rows = index.search(queries, 5)
    expected = np.argsort(-(queries @ data.T), axis=1)[:, :5]
    np.testing.assert_array_equal(rows, expected)
    assert index.search(queries, 1000)[1].shape == (20, 500)  # k capped at the index size
    np.testing.assert_array_equal(index.stored_vectors([7, 2]), data[[7, 2]])  # the exact-name fast path's vectors


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])  # int32: the int8 pass's scores
@pytest.mark.parametrize("n", [64 * 4 * 5 * 4 + 17, 64 * 4 * 5 * 4, 300])
def test_chunked_top_k_equals_torch_topk(n, dtype):
    """``_top_k`` (maxima of 64-column chunks, then the k best chunks) gives topk's values exactly, ties
    and a last, shorter chunk included, and indices that hold those values; few chunks: topk itself."""
    from spacy_sapbert.index import _top_k

    rng = np.random.default_rng(n)
    sims = torch.from_numpy(np.round(rng.normal(size=(9, n)), 1).astype(np.float32))  # many ties
    sims = (sims * 10).to(dtype) if dtype == torch.int32 else sims
    sims[0, -1] = 99  # the best score in the shorter last chunk
    sims[1, :] = 0.5  # one row all ties
    values, indices = _top_k(sims, 5)
    expected = torch.topk(sims, 5, dim=1).values
    assert torch.equal(values, expected) and values[0, 0] == 99.0 and indices[0, 0] == n - 1
    assert torch.equal(sims.gather(1, indices), values)
    assert all(len(set(row.tolist())) == 5 for row in indices)


def _unit_vectors(n: int, dim: int, seed: int, clusters: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    data = rng.normal(size=(n, dim)).astype(np.float32)
    if clusters:  # names of a concept lie close together, like real name embeddings
        centres = rng.normal(size=(clusters, dim)).astype(np.float32)
        data = centres[rng.integers(0, clusters, n)] + 0.3 * data
    return data / np.linalg.norm(data, axis=1, keepdims=True)


@pytest.mark.parametrize("kind", ["flat", "sq8"])
def test_index_built_from_chunks_equals_one_built_from_an_array(kind):
    data = _unit_vectors(3000, 16, seed=2)
    whole = VectorIndex.build(data, kind=kind)
    chunked = VectorIndex.build([data[:1000], data[1000:1001], data[1001:]], kind=kind)
    assert len(chunked) == 3000 and chunked.meta == whole.meta
    np.testing.assert_array_equal(whole.search(data[:40], 5)[1], chunked.search(data[:40], 5)[1])
    with pytest.raises(ValueError, match="same dimension"):
        VectorIndex.build([data, data[:, :8]], kind=kind)


def test_exact_top_k_streams_over_chunks_and_recall_counts_overlap():
    data = _unit_vectors(1000, 16, seed=3)
    queries = _unit_vectors(30, 16, seed=4)
    expected = np.argsort(-(queries @ data.T), axis=1)[:, :5]
    got = exact_top_k([data[:7], data[7:500], data[500:]], queries, 5)
    np.testing.assert_array_equal(got, expected)
    assert recall_at_k(got, expected) == 1.0
    half = expected.copy()
    half[:15] = -1  # half of the queries found nothing
    assert recall_at_k(half, expected) == 0.5


@pytest.mark.parametrize(
    "kind, knob, target",
    [("ivf-sq8", "nprobe", 0.95), ("hnsw", "ef_search", 0.9)],  # (SQ8 codes cap HNSW below 0.95 here)
)
def test_search_breadth_is_tuned_to_a_recall_target_and_saved(kind, knob, target, tmp_path):
    from spacy_sapbert.index import tune_ef_search

    tune = {"nprobe": tune_nprobe, "ef_search": tune_ef_search}[knob]
    data = _unit_vectors(20000, 16, seed=5, clusters=300)
    queries = data[:200] + 0.05 * _unit_vectors(200, 16, seed=6)
    exact = exact_top_k([data], queries, 5)
    index = VectorIndex.build(data, kind=kind)
    getattr(index, f"set_{knob}")(1)
    narrowest = recall_at_k(index.search(queries, 5)[1], exact)
    value, recall = tune(index, queries, exact, target=target)
    assert recall >= target > narrowest and index.meta[knob] == value
    index.to_disk(tmp_path)
    again = VectorIndex.from_disk(tmp_path)
    assert again.meta[knob] == value
    assert recall_at_k(again.search(queries, 5)[1], exact) == pytest.approx(recall)
    with pytest.raises(ValueError, match="IVF" if knob == "nprobe" else "hnsw"):
        getattr(VectorIndex.build(data[:100], kind="flat"), f"set_{knob}")(8)


@pytest.mark.parametrize("kind", ["flat-fp16", "sq8", "hnsw", "ivf-sq8", "ivf-fp16", "ivf-pq"])
def test_compressed_indexes_round_trip(kind, tmp_path):
    rng = np.random.default_rng(1)
    data = rng.normal(size=(2000, 16)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    index = VectorIndex.build(data, kind=kind)
    index.to_disk(tmp_path)
    again = VectorIndex.from_disk(tmp_path)
    assert again.meta["kind"] == kind and len(again) == 2000
    _, rows = again.search(data[:50], 1)
    assert (rows[:, 0] == np.arange(50)).mean() >= 0.9
    stored = again.stored_vectors([3, 0])  # whole vectors where kept (ivf-pq's fp16 copy), else none
    if kind == "ivf-pq":
        np.testing.assert_allclose(stored, data[[3, 0]], atol=1e-3)
    else:
        assert stored is None


def test_ivf_pq_rescores_its_candidates_with_the_stored_full_vectors(tmp_path):
    from spacy_sapbert.index import RERANK_FILE

    data = _unit_vectors(6000, 32, seed=11, clusters=600)
    queries = data[:300] + 0.05 * _unit_vectors(300, 32, seed=12)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    exact = exact_top_k([data], queries, 5)
    index = VectorIndex.build([data[:2000], data[2000:]], kind="ivf-pq")
    assert not index.index.do_polysemous_training  # slow, and useless without Hamming pre-filtering
    nprobe, recall = tune_nprobe(index, queries, exact, target=0.99)
    codes_only = recall_at_k(index.index.search(queries, 5)[1], exact)  # PQ scores, no re-scoring
    assert recall >= 0.99 > codes_only
    scores, rows = index.search(queries, 5)
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ data.T, rows, 1), atol=1e-5)
    assert (np.diff(scores, axis=1) <= 1e-7).all()  # best first

    index.to_disk(tmp_path)
    again = VectorIndex.from_disk(tmp_path)
    assert isinstance(again.rerank[0], NpyRows) and again.rerank[0].dtype == np.float16  # read by row, not mapped
    assert again.meta["nprobe"] == nprobe and again.meta["rerank"] == "fp16"
    assert recall_at_k(again.search(queries, 5)[1], exact) >= 0.98  # re-scored from fp16 now: near-ties may swap
    assert not list(tmp_path.glob(".*tmp"))

    np.save(tmp_path / RERANK_FILE, np.zeros((10, 32), np.float16))
    with pytest.raises(ValueError, match=r"rerank\.fp16\.npy has shape \(10, 32\)"):
        VectorIndex.from_disk(tmp_path)
    (tmp_path / RERANK_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="no rerank.fp16.npy"):
        VectorIndex.from_disk(tmp_path)


def test_linking_kb_exact_names_link_to_their_concepts(tiny_encoder, tmp_path):
    lkb = LinkingKB.build(RECORDS, tiny_encoder)
    lkb.to_disk(tmp_path / "kb")
    again = LinkingKB.from_disk(tmp_path / "kb")
    results = again.link(tiny_encoder, ["Heart  Attack", "mi", "bronchial asthma"], top_k=3)
    assert results[0][0].concept_id == "D2" and results[0][0].score == pytest.approx(1.0, abs=1e-4)
    assert not results[0][0].ambiguous
    assert {c.concept_id for c in results[1][:2]} == {"D2", "D3"} and results[1][0].ambiguous
    assert results[2][0].concept_id == "D4"
    assert all(len(r) <= 3 for r in results)
    assert len({c.concept_id for c in results[0]}) == len(results[0])  # one candidate per concept


def test_a_names_own_search_is_kept_at_build_and_read_instead_of_searching(tiny_encoder, tmp_path, monkeypatch):
    """The neighbour table: each name's search result, made once at build, answers a query that is
    that name's stored vector; other queries are searched; damaged tables are refused."""
    from spacy_sapbert.index import NEIGHBOURS_ROWS, NEIGHBOURS_SCORES

    built = LinkingKB.build(RECORDS, tiny_encoder)
    index, n = built.index, len(built.index)
    assert index.meta["neighbours"] == n  # a KB of fewer than NEIGHBOURS_K names keeps all of them
    rows = np.arange(n)
    table = index.neighbours_of(rows, 20)
    searched = index.search(index.stored_vectors(rows), 20)
    np.testing.assert_array_equal(table[0], searched[0])
    np.testing.assert_array_equal(table[1], searched[1])
    built.to_disk(tmp_path / "kb")
    loaded = LinkingKB.from_disk(tmp_path / "kb")
    np.testing.assert_array_equal(loaded.index.neighbours_of(rows, 20)[1], table[1])

    queries = ["asthma", "heart attack", "asthmatic heart"]
    name_rows = np.array([loaded.kb.row_of_name(q) if loaded.kb.row_of_name(q) is not None else -1 for q in queries])
    vectors = np.where(name_rows[:, None] >= 0, loaded.index.stored_vectors(np.maximum(name_rows, 0)), tiny_encoder.encode(queries))
    def ranked(linking_kb, **kw):
        found = linking_kb.candidates(vectors, queries=queries, **kw)
        return [[(c.concept_id, c.name, c.ambiguous) for c in cands] for cands in found], [c.score for cs in found for c in cs]

    expected, scores = ranked(loaded)  # every query searched
    calls = []
    search = loaded.index.search
    monkeypatch.setattr(loaded.index, "search", lambda v, k: calls.append(len(v)) or search(v, k))
    for linking_kb in (loaded, LinkingKB.build(RECORDS, tiny_encoder, neighbours=False)):
        got, got_scores = ranked(linking_kb, name_rows=name_rows)  # one query searched alone may round apart from three
        assert got == expected and got_scores == pytest.approx(scores, abs=1e-6)
    assert calls == [1]  # with the table, only the query that is no KB name is searched
    without = LinkingKB.build(RECORDS, tiny_encoder, neighbours=False)
    assert "neighbours" not in without.index.meta and without.index.neighbours_of(rows, 20) is None
    without.index.build_neighbours(k=3)  # a shallow table: deeper searches are searched
    assert without.index.neighbours_of(rows, 4) is None
    np.testing.assert_array_equal(without.index.neighbours_of(rows, 2)[1], without.index.search(without.index.stored_vectors(rows), 2)[1])
    with pytest.raises(ValueError, match="flat index"):
        VectorIndex.build(np.eye(4, dtype=np.float32), kind="hnsw").build_neighbours()

    np.save(tmp_path / "kb" / NEIGHBOURS_ROWS, np.zeros((n, 2), np.int32))
    with pytest.raises(ValueError, match=f"{NEIGHBOURS_ROWS} holds .*rebuild the KB"):
        LinkingKB.from_disk(tmp_path / "kb")
    (tmp_path / "kb" / NEIGHBOURS_SCORES).unlink()
    with pytest.raises(FileNotFoundError, match=f"no {NEIGHBOURS_SCORES}.*rebuild the KB"):
        LinkingKB.from_disk(tmp_path / "kb")


def test_linking_kb_refuses_another_encoder(tiny_encoder, tiny_bert_path, tmp_path):
    lkb = LinkingKB.build(RECORDS, tiny_encoder)
    other = SapEncoder.load(tiny_bert_path, pooling="mean", device="cpu")
    with pytest.raises(EncoderMismatchError, match="different encoder"):
        lkb.link(other, ["asthma"])


def test_failed_write_leaves_previous_kb_intact(tiny_encoder, tmp_path, monkeypatch):
    LinkingKB.build(RECORDS, tiny_encoder).to_disk(tmp_path / "kb")
    before = sorted((p.name, p.read_bytes()) for p in (tmp_path / "kb").iterdir())
    bigger = LinkingKB.build(RECORDS + [R("D9", "Migraine", ["headache"])], tiny_encoder)

    def crash(self, path):
        raise OSError("disk full")

    monkeypatch.setattr(VectorIndex, "to_disk", crash)
    with pytest.raises(OSError, match="disk full"):
        bigger.to_disk(tmp_path / "kb")
    after = sorted((p.name, p.read_bytes()) for p in (tmp_path / "kb").iterdir())
    assert after == before
    assert [p.name for p in tmp_path.iterdir()] == ["kb"]  # no temp folder left behind


def test_resumable_build_reuses_finished_chunks(tiny_encoder, tmp_path, monkeypatch):
    work = tmp_path / "work"
    full = LinkingKB.build(RECORDS, tiny_encoder, work_dir=work, chunk_size=3)
    chunks = sorted(work.glob("chunk_*.npy"))
    assert len(chunks) == 4  # 10 names in chunks of 3
    chunks[-1].unlink()  # as if the build died during the last chunk
    calls = []
    real = tiny_encoder.encode
    monkeypatch.setattr(tiny_encoder, "encode", lambda texts, **kw: calls.append(len(texts)) or real(texts, **kw))
    resumed = LinkingKB.build(RECORDS, tiny_encoder, work_dir=work, chunk_size=3)
    assert calls == [1]  # only the missing chunk was encoded
    q = tiny_encoder.encode(["asthma"])
    assert full.search_names(q, 3)[1].tolist() == resumed.search_names(q, 3)[1].tolist()


def test_chunk_encoding_splits_into_parts_that_processes_share(tiny_encoder, tmp_path):
    from spacy_sapbert.search import ChunksIncomplete, encode_chunks

    names = [f"name {i}" for i in range(10)]
    work = tmp_path / "work"
    with pytest.raises(ChunksIncomplete, match="2 chunks are left to other parts"):
        encode_chunks(tiny_encoder, names, "kb", work, chunk_size=3, part=(1, 2))
    assert sorted(f.name for f in work.glob("chunk_*.npy")) == ["chunk_00001.npy", "chunk_00003.npy"]
    files = encode_chunks(tiny_encoder, names, "kb", work, chunk_size=3, part=(0, 2))  # completes it
    together = np.concatenate([np.load(f) for f in files])
    np.testing.assert_allclose(together, tiny_encoder.encode(names), atol=1e-6)
    with pytest.raises(ValueError, match="part must be"):
        encode_chunks(tiny_encoder, names, "kb", work, part=(2, 2))


def test_exact_search_device_path_gives_the_same_rows(monkeypatch):
    """The GPU branch (a float32 copy of the vectors on the device) run on the CPU: same rows and scores."""
    data = _unit_vectors(2000, 16, seed=7, clusters=50)
    index = VectorIndex.build(data, kind="flat")
    expected = index.search(data[:30], 5)
    index.use_device("cpu")
    index.device = "meta-cpu"  # any non-"cpu" name takes the device branch ...
    real_to = torch.Tensor.to
    monkeypatch.setattr(torch.Tensor, "to", lambda t, *a, **kw: real_to(t, "cpu", *[x for x in a if isinstance(x, torch.dtype)]))
    scores, rows = index.search(data[:30], 5)  # ... which here stays on the CPU
    assert index._device_base is not None and index._device_base.dtype == torch.float32
    np.testing.assert_array_equal(rows, expected[1])
    np.testing.assert_allclose(scores, expected[0], atol=1e-6)


class _FakeFaissGpu:
    """Stands in for faiss-gpu's API: the "GPU clone" is a CPU clone that records its searches."""

    def __init__(self):
        self.moved, self.searched, self.nprobes = [], 0, []

    def index_cpu_to_gpu(self, resources, device_id, index, options):
        import faiss

        self.moved.append((device_id, options.useFloat16))
        clone, fake = faiss.clone_index(index), self

        class Clone:
            def search(self, q, k):
                fake.searched += 1
                return clone.search(q, k)

        self.clone = clone
        return Clone()

    def set_nprobe(self, index, name, value):
        import faiss

        assert name == "nprobe"
        self.nprobes.append(value)
        faiss.extract_index_ivf(self.clone).nprobe = value


@pytest.mark.parametrize("kind", ["ivf-fp16", "ivf-pq"])
def test_compressed_index_searches_on_a_faiss_gpu_when_one_is_installed(kind, monkeypatch, tmp_path):
    import types

    import faiss

    data = _unit_vectors(3000, 16, seed=13, clusters=60)
    index = VectorIndex.build(data, kind=kind)
    expected = index.search(data[:20], 5)
    index.use_device("cuda:1")  # faiss-cpu (installed here): stays on the CPU
    assert index._gpu_index is None
    np.testing.assert_array_equal(index.search(data[:20], 5)[1], expected[1])

    fake = _FakeFaissGpu()
    monkeypatch.setattr(faiss, "StandardGpuResources", lambda: object(), raising=False)
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    monkeypatch.setattr(faiss, "GpuClonerOptions", lambda: types.SimpleNamespace(useFloat16=False), raising=False)
    monkeypatch.setattr(faiss, "index_cpu_to_gpu", fake.index_cpu_to_gpu, raising=False)
    monkeypatch.setattr(faiss, "GpuParameterSpace", lambda: types.SimpleNamespace(set_index_parameter=fake.set_nprobe), raising=False)
    index.use_device("cuda:1")
    assert fake.moved == [(1, True)] and fake.nprobes == [index.meta["nprobe"]]
    np.testing.assert_array_equal(index.search(data[:20], 5)[1], expected[1])
    assert fake.searched == 1
    index.set_nprobe(2)
    assert fake.nprobes[-1] == 2 and index.meta["nprobe"] == 2
    index.to_disk(tmp_path)  # the CPU index is what is saved
    assert VectorIndex.from_disk(tmp_path).meta["nprobe"] == 2


@pytest.mark.parametrize("kind", ["ivf-sq8", "ivf-fp16"])
def test_ivf_lists_assigned_with_torch_match_faiss_own_add(kind):
    import faiss

    data = _unit_vectors(6000, 16, seed=8, clusters=40)
    ours = VectorIndex.build([data[:2500], data[2500:]], kind=kind)
    theirs = faiss.clone_index(ours.index)
    theirs.reset()
    theirs.add(data)  # FAISS assigning the lists itself, same centroids
    ivf = faiss.extract_index_ivf(theirs)
    ivf.nprobe = ours.meta["nprobe"]
    assert theirs.ntotal == len(ours) == 6000
    sizes = [faiss.extract_index_ivf(ours.index).invlists.list_size(i) for i in range(ivf.nlist)]
    assert sizes == [ivf.invlists.list_size(i) for i in range(ivf.nlist)]
    np.testing.assert_array_equal(ours.search(data[:50], 5)[1], theirs.search(data[:50], 5)[1])


def test_auto_kind_is_exact_up_to_a_million_names_then_ivf_with_a_probed_eighth():
    from spacy_sapbert.index import auto_index_kind, default_nprobe

    assert auto_index_kind(1_000_000) == "flat" and auto_index_kind(1_000_001) == "ivf-rabitq"
    assert default_nprobe(3916) == 489 and default_nprobe(100) == 32 and default_nprobe(10) == 10
    index = VectorIndex.build(_unit_vectors(4000, 16, seed=9), kind="ivf-fp16")
    assert index.meta["nprobe"] == default_nprobe(faiss_nlist(index))


def faiss_nlist(index: VectorIndex) -> int:
    import faiss

    return int(faiss.extract_index_ivf(index.index).nlist)


def test_nprobe_tuning_picks_the_smallest_rescoring_depth_that_reaches_the_target(tmp_path):
    from spacy_sapbert.index import RERANK_CHOICES

    data = _unit_vectors(6000, 32, seed=21, clusters=60)  # crowded clusters: PQ ranks many near-ties
    queries = data[:300] + 0.05 * _unit_vectors(300, 32, seed=22)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    exact = exact_top_k([data], queries, 5)
    index = VectorIndex.build(data, kind="ivf-pq")
    nlist = faiss_nlist(index)
    index.set_nprobe(nlist)
    ranked = index.index.search(queries, max(RERANK_CHOICES))[1]
    by_depth = {d: recall_at_k(index._rescore(queries, ranked[:, :d], 5)[1], exact) for d in RERANK_CHOICES}
    assert by_depth[64] < by_depth[256]  # the data is hard enough for depth to matter
    target = by_depth[256]
    nprobe, recall = tune_nprobe(index, queries, exact, target=target, choices=[nlist])
    smallest = min(d for d in RERANK_CHOICES if by_depth[d] >= target)
    assert (nprobe, index.meta["rerank_candidates"], recall) == (nlist, smallest, by_depth[smallest])
    index.to_disk(tmp_path)
    again = VectorIndex.from_disk(tmp_path)
    assert again.meta["rerank_candidates"] == smallest
    assert recall_at_k(again.search(queries, 5)[1], exact) >= target - 0.01  # (fp16 re-scoring on disk)


def test_tuning_stops_where_a_wider_search_adds_no_recall(monkeypatch):
    data = _unit_vectors(3000, 16, seed=23, clusters=100)
    queries = data[:100]
    exact = exact_top_k([data], queries, 5)
    index = VectorIndex.build(data, kind="ivf-sq8")
    nlist = faiss_nlist(index)
    tried = []
    original = index.set_nprobe
    monkeypatch.setattr(index, "set_nprobe", lambda n: (tried.append(n), original(n)))
    nprobe, recall = tune_nprobe(index, queries, exact, target=1.01, choices=[nlist, nlist, nlist, nlist])
    assert tried == [nlist, nlist] and nprobe == nlist and 0 < recall <= 1  # the unreachable target is not chased


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_npy_rows_reads_the_rows_np_load_would(tmp_path, dtype):
    data = np.arange(700 * 6, dtype=dtype).reshape(700, 6)
    np.save(tmp_path / "v.npy", data, allow_pickle=False)
    rows = NpyRows(tmp_path / "v.npy")
    assert (len(rows), rows.shape, rows.dtype) == (700, (700, 6), np.dtype(dtype))
    picks = np.array([0, 5, 5, 699, 123])
    np.testing.assert_array_equal(rows[picks], data[picks])
    np.testing.assert_array_equal(rows[10:20], data[10:20])
    np.testing.assert_array_equal(rows[690:800], data[690:])
    np.save(tmp_path / "flat.npy", np.zeros(5, np.float16), allow_pickle=False)
    with pytest.raises(ValueError, match="flat.npy must hold a C-ordered 2-D array"):
        NpyRows(tmp_path / "flat.npy")


def test_exact_search_with_fixed_passes_scores_a_query_as_it_does_alone():
    """As annotate runs it (``pass_queries``): a query's scores are bit for bit the same whatever queries share
    its product. Without fixed passes the matrix kernels, chosen by the product's size, move their last bits."""
    from spacy_sapbert.shards import SEARCH_PASS_QUERIES

    rng = np.random.default_rng(0)
    base = rng.standard_normal((60_000, 384)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    index = VectorIndex.build(base, kind="flat")
    index.pass_queries = SEARCH_PASS_QUERIES
    queries = base[:100] + 0.01 * rng.standard_normal((100, 384)).astype(np.float32)
    together = index.search(queries, 5)
    for size in (1, 3, 7, 50):
        for start in range(0, 50, size):
            part = index.search(queries[start : start + size], 5)
            assert (part[0] == together[0][start : start + size]).all() and (part[1] == together[1][start : start + size]).all()


@pytest.fixture
def small_shortlists(monkeypatch):
    """Shortlists on a test-sized index (small chunks), and the bf16 pass taken on any CPU."""
    from spacy_sapbert.index_kinds import flat

    monkeypatch.setattr(flat, "SHORTLIST_MIN_NAMES", 1000)
    monkeypatch.setattr(flat, "SHORTLIST_CHUNK", 64)
    monkeypatch.setattr(encoder_module, "fast_bf16", lambda device: True)


@pytest.fixture(params=["bf16", "int8"])
def low_precision_path(request, monkeypatch):
    """Each first pass of exact search on a test-sized index: the bf16 shortlist (small chunks, taken
    on any CPU) and the int8 copy (on a CPU where bf16 is slow; skipped where int8 products are not exact)."""
    from spacy_sapbert.index_kinds import flat
    from spacy_sapbert.index_kinds.int8_copy import int8_products_exact

    monkeypatch.setattr(flat, "SHORTLIST_MIN_NAMES", 1000)
    monkeypatch.setattr(flat, "SHORTLIST_CHUNK", 64)
    if request.param == "int8" and not int8_products_exact():
        pytest.skip("torch._int_mm is missing or not exact on this CPU: the int8 path is never taken here")
    monkeypatch.setattr(flat, "INT8_MIN_NAMES", 1000)
    monkeypatch.setattr(encoder_module, "fast_bf16", lambda device: request.param == "bf16")
    return request.param


def assert_exact_top(scores: np.ndarray, rows: np.ndarray, queries: np.ndarray, data: np.ndarray) -> None:
    """``scores`` and ``rows`` are the exact top k: float64 sums rounded to float32, best first, ties by row."""
    exact = (queries.astype(np.float64) @ data.astype(np.float64).T).astype(np.float32)
    expected = np.lexsort((np.broadcast_to(np.arange(len(data)), exact.shape), -exact), axis=1)[:, : rows.shape[1]]
    np.testing.assert_array_equal(rows, expected)
    np.testing.assert_array_equal(scores, np.take_along_axis(exact, expected, 1))


def _clustered_with_ties(n: int = 6000, dim: int = 48) -> tuple:
    data = _unit_vectors(n, dim, seed=3, clusters=40)
    data[100:160] = data[100] + 1e-3 * _unit_vectors(60, dim, seed=4)  # near-duplicate names
    data[200:210] = data[200]  # exact duplicates: ties broken by row
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    rng = np.random.default_rng(5)
    queries = data[rng.integers(0, n, 200)] + 0.2 * rng.standard_normal((200, dim)).astype(np.float32)
    queries[:3] = data[[100, 200, 205]]
    return data, queries / np.linalg.norm(queries, axis=1, keepdims=True)


def test_shortlist_search_returns_the_exact_top_k_and_refuses_a_damaged_copy(small_shortlists, tmp_path, monkeypatch):
    data, queries = _clustered_with_ties()
    index = VectorIndex.build(data, kind="flat")
    assert index.meta["shortlist"] == "bf16"
    used = []
    monkeypatch.setattr(FlatIndex, "shortlist_search", lambda self, q, k, f=FlatIndex.shortlist_search: used.append(k) or f(self, q, k))
    scores, rows = index.search(queries, 20)
    assert used == [20]
    assert_exact_top(scores, rows, queries, data)
    assert list(rows[1, :10]) == list(range(200, 210))

    index.to_disk(tmp_path / "idx")
    loaded = VectorIndex.from_disk(tmp_path / "idx")
    assert [(loaded.search(queries, 20)[i] == (scores, rows)[i]).all() for i in (0, 1)] == [True, True]
    np.save(tmp_path / "idx" / "shortlist.bf16.npy", np.zeros((64, data.shape[1]), np.uint16), allow_pickle=False)
    with pytest.raises(ValueError, match="shortlist.bf16.npy holds uint16 \\(64, 48\\), expected"):
        VectorIndex.from_disk(tmp_path / "idx")
    (tmp_path / "idx" / "shortlist.bf16.npy").unlink()
    with pytest.raises(FileNotFoundError, match="no shortlist.bf16.npy"):
        VectorIndex.from_disk(tmp_path / "idx")


def test_shortlist_search_is_exact_where_every_score_is_negative(low_precision_path):
    """The bf16 chunk maxima are read as int16 bit patterns, which orders negative bf16 scores backwards:
    a query whose best names all score below zero must still get the exact top k, from either first pass."""
    data = np.abs(_unit_vectors(6000, 48, seed=6, clusters=30))  # every name in the positive cone
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    queries = -np.abs(_unit_vectors(40, 48, seed=7))  # every score below zero
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    index = VectorIndex.build(data, kind="flat")
    assert index.meta["shortlist"] == "bf16" and index.search_path(20) == low_precision_path
    scores, rows = index.search(queries, 20)
    assert float((queries @ data.T).max()) < 0
    assert_exact_top(scores, rows, queries, data)


@pytest.mark.parametrize("max_names,shared", [(0, 4.0), (200, 4.0), (200, 1e4)])
def test_a_query_whose_shortlist_is_crowded_is_shortlisted_from_fp32_scores(low_precision_path, monkeypatch, max_names, shared):
    """Names whose scores lie closer together than bf16 or int8 tells apart (a large component they all
    share) fill a query's shortlist; beyond ``SHORTLIST_MAX_NAMES`` the query is shortlisted from fp32
    scores instead, and where fp32 cannot tell them apart either (``shared`` 1e4: every cosine above
    0.99999), from every name's float64 score: the same exact top k (ties by row) whichever applies."""
    from spacy_sapbert.index_kinds import flat

    data, queries = _clustered_with_ties()
    data[:, 0] += shared
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    if shared > 100:
        queries = data[:200] + 1e-6 * _unit_vectors(200, data.shape[1], seed=8)
        queries[1] = data[200]
    index = VectorIndex.build(data, kind="flat", neighbours=False)
    assert index.search_path(20) == low_precision_path
    monkeypatch.setattr(flat, "SHORTLIST_MAX_NAMES", max_names)  # 0: every query; 200: some of the 200 here
    scores, rows = index.search(queries, 20)
    assert_exact_top(scores, rows, queries, data)
    assert shared > 100 or list(rows[1, :10]) == list(range(200, 210))  # (degenerate names: float32 ties everywhere)


def test_shortlist_search_scores_a_query_as_it_does_alone_and_only_where_bf16_is_faster(small_shortlists, monkeypatch):
    data, queries = _clustered_with_ties()
    index = VectorIndex.build(data, kind="flat")
    together = index.search(queries, 10)
    for size in (1, 7, 50):
        for start in range(0, 100, size):
            part = index.search(queries[start : start + size], 10)
            assert (part[0] == together[0][start : start + size]).all() and (part[1] == together[1][start : start + size]).all()
    monkeypatch.setattr(encoder_module, "fast_bf16", lambda device: False)
    monkeypatch.setattr(FlatIndex, "shortlist_search", lambda *a: pytest.fail("bf16 pass on a CPU where bf16 is slower"))
    fp32 = index.search(queries, 10)
    np.testing.assert_allclose(fp32[0], together[0], atol=1e-6)  # the same top k (fp32 orders ties its own way)
    assert np.mean([set(a) == set(b) for a, b in zip(fp32[1], together[1])]) > 0.9
    small = VectorIndex.build(data[:999], kind="flat")
    assert "shortlist" not in small.meta  # below SHORTLIST_MIN_NAMES: fp32 only


def test_an_amd_cpu_searches_a_mid_sized_index_through_a_shortlist_made_in_memory(small_shortlists, monkeypatch, tmp_path):
    """Below the stored shortlist's floor, on an AMD CPU with AVX512-BF16 a flat index of at least
    ``SHORTLIST_MEMORY_MIN_NAMES`` names searches through a bf16 copy made in memory: the exact top k,
    for vectors of any norm (the largest measured then), and nothing more written to disk."""
    from spacy_sapbert import machine
    from spacy_sapbert.index_kinds import flat

    monkeypatch.setattr(flat, "SHORTLIST_MIN_NAMES", 100_000)
    monkeypatch.setattr(flat, "SHORTLIST_MEMORY_MIN_NAMES", 4000)
    data, queries = _clustered_with_ties()
    data = data * np.linspace(0.5, 3.0, len(data), dtype=np.float32)[:, None]  # not unit length
    index = VectorIndex.build(data, kind="flat")
    assert "shortlist" not in index.meta
    used = []
    monkeypatch.setattr(FlatIndex, "shortlist_search", lambda self, q, k, f=FlatIndex.shortlist_search: used.append(k) or f(self, q, k))
    monkeypatch.setattr(machine, "cpu_vendor", lambda: "GenuineIntel")
    index.search(queries, 20)
    assert used == []  # measured faster on AMD only
    monkeypatch.setattr(machine, "cpu_vendor", lambda: "AuthenticAMD")
    scores, rows = index.search(queries, 20)
    assert used == [20] and index._max_norm == pytest.approx(float(np.linalg.norm(data, axis=1).max()), rel=1e-6)
    assert_exact_top(scores, rows, queries, data)
    index.to_disk(tmp_path / "idx")
    assert not (tmp_path / "idx" / flat.SHORTLIST_FILE).exists()
    used.clear()
    VectorIndex.build(data[:3999], kind="flat").search(queries, 20)
    assert used == []  # below the floor: fp32


@pytest.mark.parametrize("low_precision_path", ["int8"], indirect=True)
def test_int8_search_returns_the_exact_top_k_whatever_the_batch(low_precision_path, monkeypatch):
    """The int8 first pass keeps every name that could be in the top k: the exact top k (ties by row)
    for vectors with one large coordinate (as MiniLM's have) and of any norm, a query scored as it is alone."""
    data, queries = _clustered_with_ties(n=6001)  # a last, shorter chunk
    data[:, 3] += 2.0 * (np.arange(len(data)) % 3 == 0)  # a large coordinate in a third of the names
    data *= np.linspace(0.5, 2.0, len(data), dtype=np.float32)[:, None]
    queries[5:] *= 3.0
    index = VectorIndex.build(data, kind="flat", neighbours=False)
    used = []
    monkeypatch.setattr(FlatIndex, "int8_search", lambda self, q, k, f=FlatIndex.int8_search: used.append(k) or f(self, q, k))
    scores, rows = index.search(queries, 20)
    assert used == [20]
    assert_exact_top(scores, rows, queries, data)
    for size in (1, 7, 50):
        for start in range(0, 100, size):
            part = index.search(queries[start : start + size], 20)
            assert (part[0] == scores[start : start + size]).all() and (part[1] == rows[start : start + size]).all()


def test_a_zero_query_ties_every_name_on_each_first_pass(low_precision_path):
    """A zero vector scores 0 against every name: the first k rows, as exact search ties them, on
    either first pass (the int8 pass's floor, far below any int32 score, once overflowed its cast)."""
    data, queries = _clustered_with_ties(n=6001)
    queries = np.concatenate([queries[:2], np.zeros((1, data.shape[1]), np.float32)])
    scores, rows = VectorIndex.build(data, kind="flat", neighbours=False).search(queries, 5)
    assert rows[2].tolist() == [0, 1, 2, 3, 4] and not scores[2].any()
    assert_exact_top(scores, rows, queries, data)


@pytest.mark.parametrize("dim,useful", [(40, None), (384, 0.05)])
def test_the_int8_error_bound_holds_for_every_name_and_query(dim, useful):
    """|true score - int8 score| stays within the bound ``Int8Copy.quantize`` gives, for every pair,
    whatever the norms and with one large coordinate; for unit vectors of MiniLM's size the bound is
    small enough to be of use (MEDIC's: 0.036 a unit query)."""
    from spacy_sapbert.index_kinds.int8_copy import QUERY_LEVELS, Int8Copy

    data = _unit_vectors(2000, dim, seed=11, clusters=20)
    queries = _unit_vectors(60, dim, seed=12)
    if useful is None:
        data[:, 0] += 1.5
        data *= np.linspace(0.2, 3.0, len(data), dtype=np.float32)[:, None]
        queries *= 2.0
    data, queries = torch.from_numpy(data), torch.from_numpy(queries)
    copy = Int8Copy(data)
    codes, units, bounds = copy.quantize(queries)
    assert np.allclose(units, (queries.double() @ copy.rotation).abs().amax(1).numpy() / QUERY_LEVELS * copy.scale)
    off = (queries.double() @ data.double().T).numpy() - units[:, None] * (codes.double() @ copy.codes.double().T).numpy()
    assert (np.abs(off) <= bounds[:, None]).all()
    if useful is not None:
        assert bounds.max() < useful


def test_the_search_path_follows_the_cpu_and_the_index_size(monkeypatch):
    from spacy_sapbert import machine
    from spacy_sapbert.index_kinds import flat, int8_copy

    monkeypatch.setattr(flat, "INT8_MIN_NAMES", 4000)
    monkeypatch.setattr(flat, "SHORTLIST_MEMORY_MIN_NAMES", 4000)
    monkeypatch.setattr(flat, "int8_products_exact", lambda: True)
    monkeypatch.setattr(machine, "cpu_vendor", lambda: "AuthenticAMD")
    data = _unit_vectors(6000, 16, seed=9)
    index, small = VectorIndex.build(data, kind="flat"), VectorIndex.build(data[:3999], kind="flat")
    monkeypatch.setattr(encoder_module, "fast_bf16", lambda device: True)
    assert (index.search_path(5), small.search_path(5)) == ("bf16", "fp32")
    monkeypatch.setattr(machine, "cpu_vendor", lambda: "GenuineIntel")
    assert index.search_path(5) == "fp32"  # a bf16 copy made in memory only paid on AMD
    monkeypatch.setattr(encoder_module, "fast_bf16", lambda device: False)
    assert (index.search_path(5), small.search_path(5), index.search_path(40)) == ("int8", "fp32", "fp32")  # k: 4k chunks needed
    assert index.describe().endswith("; searched here in int8")  # (``info`` prints it)
    monkeypatch.setattr(flat, "int8_products_exact", lambda: False)
    assert index.search_path(5) == "fp32"
    monkeypatch.setattr(flat, "int8_products_exact", lambda: True)
    index.device = "cuda:0"
    assert index.search_path(5) == "fp32"
    # int8 products that overflow an int16 intermediate (as AVX2's kernels would at a wider range) are refused
    int8_copy.int8_products_exact.cache_clear()
    monkeypatch.setattr(int8_copy.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch, "_int_mm", lambda a, b: (a.long() @ b.long()).clamp(-(2**15), 2**15 - 1).int())
    try:
        assert int8_copy.int8_products_exact() is False
        int8_copy.int8_products_exact.cache_clear()
        monkeypatch.setattr(torch, "_int_mm", lambda a, b: (a.long() @ b.long()).int())
        assert int8_copy.int8_products_exact() is True
        int8_copy.int8_products_exact.cache_clear()
        monkeypatch.setattr(int8_copy.platform, "machine", lambda: "aarch64")
        assert int8_copy.int8_products_exact() is False  # measured faster on x86-64 only
    finally:
        int8_copy.int8_products_exact.cache_clear()


def test_copies_made_in_memory_are_made_again_when_names_are_added(low_precision_path, monkeypatch):
    """The bf16 copy an AMD CPU makes in memory and the int8 copy are made from the vectors at the first
    search: a name added afterwards is found (before, an in-memory bf16 copy kept the old rows)."""
    from spacy_sapbert import machine
    from spacy_sapbert.index_kinds import flat

    monkeypatch.setattr(flat, "SHORTLIST_MIN_NAMES", 100_000)
    monkeypatch.setattr(flat, "SHORTLIST_MEMORY_MIN_NAMES", 1000)
    monkeypatch.setattr(machine, "cpu_vendor", lambda: "AuthenticAMD")
    data, queries = _clustered_with_ties()
    index = VectorIndex.build(data, kind="flat", neighbours=False)
    assert index.search_path(5) == low_precision_path and "shortlist" not in index.meta
    index.search(queries, 5)
    added = _unit_vectors(100, data.shape[1], seed=10)
    index.add_vectors(added)
    scores, rows = index.search(added[:20], 5)
    assert list(rows[:, 0]) == list(range(len(data), len(data) + 20))
    assert_exact_top(scores, rows, added[:20], np.concatenate([data, added]))
