"""What only a GPU can show: the CUDA paths of the encoder, exact search, the linker and the
transformer tagger (the self-alignment trainer's are in ``test_training_runs.py``, marked ``gpu``).

Skipped where torch sees no CUDA device (every CI run). On a GPU machine: ``python -m pytest -m gpu``.
"""
from __future__ import annotations

import numpy as np
import pytest
import spacy
import torch
from conftest import needs_cuda
from test_linker import RECORDS, TEXTS, annotations, make_nlp

from spacy_sapbert.encoder import SapEncoder
from spacy_sapbert.index import VectorIndex
from training.ner_trf import train_tagger

pytestmark = [pytest.mark.gpu, needs_cuda]

NAMES = ["heart attack", "myocardial infarction", "type 2 diabetes mellitus", "iron deficiency anemia",
         "renal failure", "migraine", "bronchial asthma", "lung cancer"]


def test_encoder_on_cuda_gives_the_cpu_vectors(tiny_bert_path):
    cpu = SapEncoder.load(tiny_bert_path, device="cpu", precision="fp32")
    gpu = SapEncoder.load(tiny_bert_path, device="cuda", precision="fp32")
    assert gpu.device.type == "cuda"
    np.testing.assert_allclose(gpu.encode(NAMES), cpu.encode(NAMES), atol=1e-4)
    auto = SapEncoder.load(tiny_bert_path, device="auto", precision="auto")
    assert (auto.device.type, auto.precision) == ("cuda", "bf16" if torch.cuda.is_bf16_supported() else "fp32")
    assert (auto.encode(NAMES) * cpu.encode(NAMES)).sum(1).min() > 0.99


def test_exact_search_on_cuda_returns_the_cpu_rows_and_scores():
    rng = np.random.default_rng(0)
    base = rng.standard_normal((20000, 64)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    queries = base[:500] + 0.5 * rng.standard_normal((500, 64)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    index = VectorIndex.build(base, kind="flat", neighbours=False)
    cpu_scores, cpu_rows = index.search(queries, 10)
    index.use_device("cuda")
    gpu_scores, gpu_rows = index.search(queries, 10)
    assert index._device_base.is_cuda and index._device_base.dtype == torch.float32
    np.testing.assert_allclose(gpu_scores, cpu_scores, atol=1e-5)
    apart = np.diff(cpu_scores, axis=1) < -1e-5  # neighbours whose order float32 rounding cannot swap
    assert apart.mean() > 0.99 and (gpu_rows[:, :-1][apart] == cpu_rows[:, :-1][apart]).all()


def test_linker_on_cuda_links_as_on_the_cpu(kb_folder, tiny_bert_path):
    kb = kb_folder(RECORDS)
    on_cpu = [annotations(d) for d in make_nlp(kb, tiny_bert_path, device="cpu").pipe(TEXTS)]
    nlp = make_nlp(kb, tiny_bert_path, device="cuda")
    on_gpu = [annotations(d) for d in nlp.pipe(TEXTS, batch_size=2)]
    assert nlp.get_pipe("sapbert_linker").encoder.device.type == "cuda"

    def without_scores(docs):
        return [[(t, label, kb_id, cui, [(c[0], c[1], c[3]) for c in cands]) for t, label, kb_id, cui, cands in d] for d in docs]

    assert without_scores(on_gpu) == without_scores(on_cpu) and any(on_cpu)
    for doc_gpu, doc_cpu in zip(on_gpu, on_cpu):
        for ent_gpu, ent_cpu in zip(doc_gpu, doc_cpu):
            np.testing.assert_allclose([c[2] for c in ent_gpu[4]], [c[2] for c in ent_cpu[4]], atol=1e-4)


@pytest.fixture(scope="module")
def cuda_tagger(ner_corpora, tiny_bert_path, tmp_path_factory):
    """A tiny tagger trained on CUDA (bf16 where supported): its ``model-best`` folder and the training result."""
    out = tmp_path_factory.mktemp("tagger") / "run"
    result = train_tagger(out, data_dir=ner_corpora, encoder=str(tiny_bert_path), epochs=2, max_minutes=5, batch_tokens=256,
                          max_length=32, overlap=8, precision="auto", device="cuda")
    return out / "model-best", result


def load_tagger(folder, device: str):
    # a tiny model tags little: a negative outside bias makes it propose entities to compare
    settings = {"device": device, "precision": "fp32", "outside_bias": -2.0}
    return spacy.load(folder, config={"components": {"sapbert_ner": settings}})


TAGGED = "Tamoxifen caused renal failure and anemia in patients given lidocaine."


def test_tagger_trains_on_cuda_and_tags_as_on_the_cpu(cuda_tagger):
    folder, result = cuda_tagger
    assert result["steps"] > 0
    gpu, cpu = load_tagger(folder, "cuda"), load_tagger(folder, "cpu")
    assert gpu.get_pipe("sapbert_ner").device.type == "cuda"
    docs = [" ".join([TAGGED] * 40), TAGGED, ""]  # the first one spans many windows

    def entities(nlp):
        return [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in nlp.pipe(docs, batch_size=2)]

    tagged = entities(gpu)
    assert tagged == entities(cpu) and tagged[0] and tagged[1]


def test_linker_overlapping_a_cuda_tagger_links_as_in_turn(cuda_tagger, kb_folder, tiny_bert_path):
    """``overlap``: the linker encodes batch n on CUDA in its thread while the tagger tags batch n + 1
    on the same device; the links, their order and scores are those of linking in turn."""
    kb = kb_folder(RECORDS)
    texts = [f"{TAGGED} Case {i}: fever and seizure." * (1 + i % 3) for i in range(24)]

    def linked(overlap: bool):
        nlp = load_tagger(cuda_tagger[0], "cuda")
        nlp.add_pipe("sapbert_linker", config={"kb": str(kb), "encoder": str(tiny_bert_path), "device": "cuda",
                                               "precision": "fp32", "overlap": overlap})
        assert nlp.get_pipe("sapbert_linker").overlap is overlap
        return [annotations(d) for d in nlp.pipe(texts, batch_size=4)]

    in_turn = linked(False)
    assert sum(map(len, in_turn)) > len(texts)
    for _ in range(3):  # a race, if any, need not show the first time
        assert linked(True) == in_turn
