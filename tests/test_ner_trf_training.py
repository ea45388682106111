"""Fine-tuning the transformer tagger (training/ner_trf.py) on the tiny corpus fixtures with a tiny BERT."""
from __future__ import annotations

import pytest
import spacy
import torch

from spacy_sapbert.evaluation.datasets import read_pubtator
from spacy_sapbert.fileio import read_json
from spacy_sapbert.tagger import bio_tags
from training.ner import CORPUS_FILES, make_tokenizer_nlp
from training.ner_trf import allowed_tags, partial_label_loss, read_split, train_tagger


def test_ncbi_tokens_in_known_chemical_names_may_be_chemicals(ner_corpora):
    nlp = make_tokenizer_nlp()
    docs, labels, raw = read_split(nlp, ner_corpora, "train")
    assert labels[0] == ("Chemical", "Disease") and labels[-1] == ("Disease",)
    assert set(raw) == {"cdr", "ncbi"} and len(raw["ncbi"]) == len(read_pubtator(ner_corpora / CORPUS_FILES[("ncbi", "train")]))
    tags = bio_tags(["Chemical", "Disease"])
    ncbi = docs[-1]
    allowed = allowed_tags(ncbi, tags, labels[-1])
    tamoxifen = next(t.i for t in ncbi if t.text == "tamoxifen")  # a BC5CDR-train chemical: unknown in NCBI-disease
    assert [tags[j] for j in allowed[tamoxifen].nonzero()[0]] == ["O", "B-Chemical", "I-Chemical"]
    took = next(t.i for t in ncbi if t.text == "took")  # any other NCBI-disease token is outside
    assert [tags[j] for j in allowed[took].nonzero()[0]] == ["O"]
    tumours = next(e for e in ncbi.ents if e.text == "tumours")
    assert [tags[j] for j in allowed[tumours.start].nonzero()[0]] == ["B-Disease"]
    cdr = docs[0]
    lidocaine = next(e for e in cdr.ents if e.label_ == "Chemical")
    outside = next(t.i for t in cdr if t.ent_iob_ == "O")
    assert [tags[j] for j in allowed_tags(cdr, tags, labels[0])[outside].nonzero()[0]] == ["O"]  # BC5CDR: outside is outside
    assert allowed_tags(cdr, tags, labels[0])[lidocaine.start].sum() == 1


def test_partial_label_loss_is_cross_entropy_for_one_allowed_tag():
    from spacy_sapbert.tagger import Window

    logits = torch.randn(1, 4, 3)
    windows = [Window(0, [0, 1, 2, 3], [0, 1], [1, 2])]
    one = [torch.tensor([[False, True, False], [True, False, False]])]
    expected = torch.nn.functional.cross_entropy(logits[0, [1, 2]], torch.tensor([1, 0]))
    assert torch.allclose(partial_label_loss(logits, windows, one), expected)
    anything = [torch.ones(2, 3, dtype=torch.bool)]
    assert float(partial_label_loss(logits, windows, anything)) == pytest.approx(0.0, abs=1e-6)


def test_train_select_save_and_resume(ner_corpora, tiny_bert_path, tmp_path):
    out = tmp_path / "run"
    first = train_tagger(out, data_dir=ner_corpora, encoder=str(tiny_bert_path), epochs=2, max_minutes=5, batch_tokens=256,
                         max_length=32, overlap=8, precision="fp32", device="cpu")
    assert [row["epoch"] for row in first["history"]] == [0, 1] and first["steps"] > 0
    nlp = spacy.load(out / "model-best")
    assert nlp.pipe_names == ["sapbert_ner"] and nlp.get_pipe("sapbert_ner").labels == ("Chemical", "Disease")
    assert [t.text for t in nlp.make_doc("xenon-133")] == ["xenon", "-", "133"]  # the biomedical tokenizer travels
    assert (out / "model-last" / "sapbert_ner" / "model.safetensors").is_file()
    state = read_json(next((out / "checkpoints").glob("step-*")) / "state.json")
    assert state["epoch"] == 2
    resumed = train_tagger(out, data_dir=ner_corpora, encoder=str(tiny_bert_path), epochs=3, max_minutes=5, batch_tokens=256,
                           max_length=32, overlap=8, precision="fp32", device="cpu", resume=True)
    assert [row["epoch"] for row in resumed["history"]] == [0, 1, 2]
    assert resumed["steps"] > first["steps"]


def test_budget_stops_training(ner_corpora, tiny_bert_path, tmp_path):
    result = train_tagger(tmp_path / "run", data_dir=ner_corpora, encoder=str(tiny_bert_path), epochs=50, max_minutes=0.0,
                          batch_tokens=256, max_length=32, overlap=8, precision="fp32", device="cpu")
    assert result["history"] == [] and result["steps"] == 0
