"""Shared fixtures: a tiny random BERT with a WordPiece vocab made on the fly, and small KBs.

Nothing here downloads; torch runs on one thread (two crawl when the CPU is shared).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import pytest
import torch

torch.set_num_threads(1)

def run_forked(target, *args, timeout: float = 60):
    """(hung, what ``target(*args, queue)`` put on the queue) for ``target`` run in a forked process;
    one that is still running after ``timeout`` seconds is killed and counts as hung."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=target, args=(*args, queue))
    child.start()
    child.join(timeout)
    if child.is_alive():
        child.kill()
        return True, None
    return False, queue.get(timeout=10)


# the CUDA paths' tests (marked ``gpu``): skipped where torch sees no CUDA device, as in every CI run
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

TINY_WORDS = (
    "diabetes mellitus type 1 2 insulin dependent heart attack myocardial infarction "
    "cardiac arrest hypertension high blood pressure asthma bronchial cancer tumor neoplasm "
    "breast colon lung kidney renal failure disease syndrome deficiency anemia iron "
    "headache migraine pain fever seizure epilepsy"
).split()


def make_tiny_bert(folder: Path, words: Iterable[str] = TINY_WORDS, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Write a randomly initialised BERT and a WordPiece vocab covering ``words`` to ``folder``."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder.mkdir(parents=True, exist_ok=True)
    chars = sorted({c for w in words for c in w.lower()} | set("abcdefghijklmnopqrstuvwxyz0123456789-,.()'/"))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += sorted({w.lower() for w in words})
    vocab += [c for c in chars if c not in vocab] + [f"##{c}" for c in chars]
    (folder / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n", encoding="utf8")
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": 64})
    )
    # Loading from the folder works the same in transformers 4 and 5 (their constructors differ).
    AutoTokenizer.from_pretrained(str(folder)).save_pretrained(str(folder))
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(dict.fromkeys(vocab)),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=hidden * 2,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(str(folder), safe_serialization=True)
    return folder


@pytest.fixture(autouse=True)
def int8_maxima_in_a_temporary_folder(tmp_path_factory, monkeypatch):
    """The int8 encoder's calibration maxima go to the user cache folder; in tests, to a temporary one."""
    from spacy_sapbert import int8

    folder = tmp_path_factory.getbasetemp() / "int8-cache"
    shipped = int8.maxima_file
    monkeypatch.setattr(int8, "maxima_file", lambda fingerprint, folder_=None, calibration=int8.CALIBRATION_FILE:
                        shipped(fingerprint, folder_ or folder, calibration))


@pytest.fixture(scope="session")
def tiny_bert_path(tmp_path_factory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny_bert") / "model")


@pytest.fixture(scope="session")
def kb_folder(tiny_encoder, tmp_path_factory):
    """Build a KB folder from concept records with the tiny encoder: ``kb_folder(RECORDS)`` (a
    test module's ``kb_path``)."""
    def build(records) -> Path:
        from spacy_sapbert.search import LinkingKB

        path = tmp_path_factory.mktemp("kb") / "kb"
        LinkingKB.build(records, tiny_encoder).to_disk(path)
        return path

    return build


@pytest.fixture(scope="session")
def tiny_encoder(tiny_bert_path):
    from spacy_sapbert.encoder import SapEncoder

    return SapEncoder.load(tiny_bert_path, device="cpu", precision="fp32")  # exact on every CPU


@pytest.fixture(scope="session")
def ner_corpora(tmp_path_factory) -> Path:
    """The NER workflow's benchmark folder layout (``training.ner.CORPUS_FILES``), every split filled
    with the tiny corpus fixtures in ``fixtures/ner``."""
    import shutil

    from training.ner import CORPUS_FILES

    fixtures = Path(__file__).parent / "fixtures" / "ner"
    root = tmp_path_factory.mktemp("benchmarks")
    for (name, _split), rel in CORPUS_FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(fixtures / ("cdr.PubTator.txt" if name == "cdr" else "ncbi.txt"), root / rel)
    return root
