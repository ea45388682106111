"""The ``sapbert_ner`` transformer tagger: BIO decoding, windows, save/load, and the shipped model."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import spacy
import torch
from safetensors.torch import load_file, save_file
from spacy.tokens import Span
from spacy.training import Example

from spacy_sapbert.pipelines import SHIPPED_NER_TRF, build_pipeline
from spacy_sapbert.tagger import (
    WEIGHTS_FILE,
    WORD_EMBEDDINGS,
    TransformerTagger,
    allowed_transitions,
    bio_tags,
    tag_spans,
    viterbi,
    window_bounds,
)

TEXT = "Iron deficiency anemia and breast cancer; headache, fever and seizure."


def _tagger_nlp(encoder: Path, **config) -> spacy.Language:
    # on the CPU wherever a GPU is present too: these tests swap in CPU models and assert the CPU's
    # bit-for-bit batching (the CUDA path has its own tests in test_gpu.py)
    nlp = spacy.blank("en")
    tagger = nlp.add_pipe("sapbert_ner", config={"encoder": str(encoder), "precision": "fp32", "device": "cpu", **config})
    tagger.initialize(labels=["Chemical", "Disease"])
    return nlp


def _ents(doc):
    return [(e.text, e.label_) for e in doc.ents]


def test_viterbi_never_starts_an_entity_with_i():
    tags = bio_tags(["Chemical", "Disease"])
    assert tags == ["O", "B-Chemical", "I-Chemical", "B-Disease", "I-Disease"]
    scores = np.log(np.full((3, 5), 0.01))
    scores[0, tags.index("I-Disease")] = np.log(0.9)  # greedy: an I- with no B- before it
    scores[1, tags.index("I-Disease")] = np.log(0.9)
    scores[0, tags.index("B-Disease")] = np.log(0.5)
    path = viterbi(scores, allowed_transitions(tags))
    assert [tags[t] for t in path[:2]] == ["B-Disease", "I-Disease"]
    assert tag_spans([0, 3, 4, 1, 0, 3], tags) == [(1, 3, "Disease"), (3, 4, "Chemical"), (5, 6, "Disease")]


@pytest.mark.parametrize("n,capacity,overlap", [(5, 8, 2), (8, 8, 2), (9, 8, 2), (100, 8, 2), (100, 10, 6), (37, 10, 0)])
def test_each_piece_is_owned_once_and_away_from_inner_edges(n, capacity, overlap):
    bounds = window_bounds(n, capacity, overlap)
    owned = [p for _, _, lo, hi in bounds for p in range(lo, hi)]
    assert owned == list(range(n))
    for k, (start, end, lo, hi) in enumerate(bounds):
        assert end - start == min(capacity, n) and start <= lo <= hi <= end
        if k > 0:
            assert lo - start >= overlap // 2  # context on the left, except at the doc's start
        if k < len(bounds) - 1:
            assert end - hi >= overlap // 2


class ContextFree(torch.nn.Module):
    """A stand-in model whose tag scores depend on the wordpiece alone, so any windowing must give
    the same tags: what the windows and the merge do is all that is tested."""

    def __init__(self, scores: torch.Tensor):
        super().__init__()
        self.table = torch.nn.Embedding.from_pretrained(scores)

    def forward(self, input_ids, attention_mask):
        return self.table(input_ids)


def test_an_entity_across_a_window_edge_is_whole(tiny_bert_path):
    nlp = _tagger_nlp(tiny_bert_path, max_length=8, overlap=2)
    tagger: TransformerTagger = nlp.get_pipe("sapbert_ner")
    vocab = tagger._wordpieces.get_vocab()
    table = torch.zeros(len(vocab), 5)
    table[:, 0] = 5.0
    table[vocab["breast"]] = torch.tensor([0.0, 0.0, 0.0, 5.0, 0.0])  # B-Disease
    table[vocab["cancer"]] = torch.tensor([0.0, 0.0, 0.0, 0.0, 5.0])  # I-Disease
    tagger.model = ContextFree(table)
    for k in range(12):  # the first text whose window edge falls between "breast" and "cancer"
        text = "pain " * k + "breast cancer " + "fever " * 12
        doc = nlp.make_doc(text)
        breast = next(t.i for t in doc if t.text == "breast")
        owner = {t: w for w, window in enumerate(tagger.windows([doc])) for t in window.tokens}
        if owner[breast] != owner[breast + 1]:
            break
    assert owner[breast] != owner[breast + 1]  # the entity straddles two windows
    assert _ents(nlp(text)) == [("breast cancer", "Disease")]
    tagger.max_length, tagger.overlap = 512, 128  # one window: the same entities
    assert len(tagger.windows([doc])) == 1 and _ents(nlp(text)) == [("breast cancer", "Disease")]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_docs_entities_do_not_depend_on_the_docs_beside_it(tiny_bert_path, precision):
    """Tag scores bit for bit the same alone or in a batch of other docs (n_process, cluster runs)."""
    from spacy_sapbert.encoder import native_bf16

    if precision == "bf16" and not native_bf16(torch.device("cpu")):
        pytest.skip("bf16 is emulated on this CPU; auto precision keeps fp32 here")
    nlp = _tagger_nlp(tiny_bert_path, max_length=16, overlap=4, batch_size=3, precision=precision)
    tagger = nlp.get_pipe("sapbert_ner")
    docs = [nlp.make_doc(t) for t in (TEXT, "Fever.", "Breast cancer and renal failure; headache " * 3, "Asthma and seizure.")]
    together = tagger.tag_scores(docs)
    for doc, scores in zip(docs, together):
        assert np.array_equal(tagger.tag_scores([doc])[0], scores, equal_nan=True)


def test_labels_come_from_examples_or_are_required(tiny_bert_path):
    nlp = spacy.blank("en")
    tagger = nlp.add_pipe("sapbert_ner", config={"encoder": str(tiny_bert_path)})
    with pytest.raises(ValueError, match="no labels"):
        tagger.initialize()
    doc = nlp.make_doc("Iron deficiency anemia.")
    ref = doc.copy()
    ref.ents = [Span(ref, 0, 3, label="Disease")]
    tagger.initialize(lambda: [Example(doc, ref)])
    assert tagger.labels == ("Disease",) and tagger.tags == ["O", "B-Disease", "I-Disease"]
    with pytest.raises(ValueError, match="not initialised"):
        spacy.blank("en").add_pipe("sapbert_ner")(nlp.make_doc("text"))


def test_save_load_keeps_predictions_and_leaves_out_the_base_embeddings(tiny_bert_path, tmp_path):
    base = tmp_path / "base"
    shutil.copytree(tiny_bert_path, base)
    nlp = _tagger_nlp(base)
    tagger = nlp.get_pipe("sapbert_ner")
    torch.manual_seed(1)
    with torch.no_grad():  # a classifier that tags something, rounded to fp16 like the saved weights
        tagger.model.classifier.weight.copy_(torch.randn_like(tagger.model.classifier.weight).half().float())
    doc = nlp(TEXT)
    assert doc.ents  # the test means something only if entities are predicted
    nlp.to_disk(tmp_path / "pipeline")
    stored = load_file(str(tmp_path / "pipeline" / "sapbert_ner" / WEIGHTS_FILE))
    assert WORD_EMBEDDINGS not in stored and all(t.dtype == torch.float16 for t in stored.values())
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("sapbert_ner").labels == ("Chemical", "Disease")
    assert _ents(loaded(TEXT)) == _ents(doc)
    again = spacy.blank("en").add_pipe("sapbert_ner", config={"precision": "fp32"})
    again.from_bytes(loaded.get_pipe("sapbert_ner").to_bytes())
    assert [(e.start, e.end, e.label_) for e in again(spacy.blank("en")(TEXT)).ents] == [(e.start, e.end, e.label_) for e in doc.ents]

    # the base folder's embeddings changed: the tagger refuses to load with them
    weights = load_file(str(base / "model.safetensors"))
    weights["embeddings.word_embeddings.weight"] = weights["embeddings.word_embeddings.weight"] + 1
    save_file(weights, str(base / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match="not the ones it was trained with"):
        spacy.load(tmp_path / "pipeline")

    # embeddings that differ from the base (trained) are stored, and the pipeline loads without the base
    with torch.no_grad():
        tagger.model.bert.embeddings.word_embeddings.weight.mul_(2)
    nlp.to_disk(tmp_path / "own")
    assert WORD_EMBEDDINGS in load_file(str(tmp_path / "own" / "sapbert_ner" / WEIGHTS_FILE))
    shutil.rmtree(base)
    assert _ents(spacy.load(tmp_path / "own")(TEXT)) == _ents(nlp(TEXT))


def test_settings_are_checked(tiny_bert_path):
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match="overlap"):
        nlp.add_pipe("sapbert_ner", config={"max_length": 8, "overlap": 6})
    with pytest.raises(ValueError, match="precision"):
        nlp.add_pipe("sapbert_ner", name="other", config={"precision": "int8"})


def test_ner_trf_detector_feeds_one_linker_per_label(tiny_bert_path, tmp_path):
    """build_pipeline's ner-trf detector (here a saved tagger as ner_model): each entity is linked
    by the linker of its label, against that label's KB."""
    from spacy_sapbert.build import build_kb_folder
    from spacy_sapbert.encoder import SapEncoder
    from spacy_sapbert.records import ConceptRecord

    nlp = _tagger_nlp(tiny_bert_path)
    torch.manual_seed(1)
    with torch.no_grad():
        classifier = nlp.get_pipe("sapbert_ner").model.classifier
        classifier.weight.copy_(torch.randn_like(classifier.weight))
    nlp.to_disk(tmp_path / "tagger")
    encoder = SapEncoder.load(tiny_bert_path, device="cpu", precision="fp32")
    for label, cid, name in (("Chemical", "C:1", "iron"), ("Disease", "D:1", "anemia")):
        build_kb_folder([ConceptRecord(id=cid, name=name)], encoder, tmp_path / label, progress=False)
    pipeline = build_pipeline({"Chemical": tmp_path / "Chemical", "Disease": tmp_path / "Disease"}, "ner-trf",
                              ner_model=tmp_path / "tagger", abbreviations=False)
    assert pipeline.pipe_names == ["sapbert_ner", "sapbert_context", "sapbert_linker_chemical", "sapbert_linker_disease"]
    doc = pipeline(TEXT)
    assert {e.label_ for e in doc.ents} == {"Chemical", "Disease"}
    assert all(e.kb_id_ == ("C:1" if e.label_ == "Chemical" else "D:1") for e in doc.ents)


@pytest.mark.skipif(not SHIPPED_NER_TRF.exists(), reason="the shipped transformer NER is built by training/ner_trf.py")
def test_shipped_transformer_ner_tags_both_labels_offline():
    nlp = spacy.load(SHIPPED_NER_TRF)
    assert nlp.pipe_names == ["sapbert_ner"] and nlp.get_pipe("sapbert_ner").labels == ("Chemical", "Disease")
    ents = _ents(nlp("Lidocaine-induced cardiac asystole in a woman with breast cancer treated with tamoxifen."))
    assert ("Lidocaine", "Chemical") in ents and ("tamoxifen", "Chemical") in ents
    assert ("cardiac asystole", "Disease") in ents and ("breast cancer", "Disease") in ents


@pytest.mark.skipif(not SHIPPED_NER_TRF.exists(), reason="the shipped transformer NER is built by training/ner_trf.py")
def test_shipped_ner_with_fixed_passes_scores_a_doc_as_it_does_alone():
    """As annotate runs it (``pass_windows``): a doc's tag scores are bit for bit its scores alone, whatever
    docs of the same window width share its batch (MiniLM's kernels depend on the size of the product)."""
    from spacy_sapbert.shards import TAGGER_PASS_WINDOWS

    nlp = spacy.load(SHIPPED_NER_TRF)
    tagger = nlp.get_pipe("sapbert_ner")
    tagger.pass_windows = TAGGER_PASS_WINDOWS
    texts = [f"Patient {i} developed {d} after {c} treatment." for i, (d, c) in enumerate(
        [("hepatitis", "isoniazid"), ("seizures", "lidocaine"), ("nephrotoxicity", "cisplatin"), ("asthma", "aspirin"),
         ("neutropenia", "clozapine"), ("hypotension", "propofol")])]
    docs = [nlp.make_doc(t) for t in texts]
    together = tagger.tag_scores(docs)
    for doc, scores in zip(docs, together):
        assert np.array_equal(tagger.tag_scores([doc])[0], scores, equal_nan=True), doc.text
