"""The plain BERT loader (``spacy_sapbert.bert``): the same weights, vocabulary, fingerprint and
vectors as transformers' ``BertModel``, without importing transformers' model code."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from spacy_sapbert.bert import BertEncoder, Packing, load_bert
from spacy_sapbert.encoder import SapEncoder, passes

TEXTS = [
    "diabetes mellitus type 2",
    "Myocardial Infarction",
    "café-au-lait spots",
    "Ärztliche Übersicht (renal) failure",
    "x" * 300,
    "",
    "  heart   attack  ",
    "seizure " * 40,
    "日本語 テスト",
]


def _both(path, **kw):
    plain = SapEncoder.load(path, device="cpu", precision="fp32", plain_bert=True, **kw)
    full = SapEncoder.load(path, device="cpu", precision="fp32", plain_bert=False, **kw)
    return plain, full


def test_same_tokens_fingerprint_and_vectors_as_transformers(tiny_bert_path):
    plain, full = _both(tiny_bert_path, max_length=12)
    assert isinstance(plain.model, BertEncoder) and not isinstance(full.model, BertEncoder)
    assert plain.fingerprint == full.fingerprint
    assert plain.tokenizer.get_vocab() == full.tokenizer.get_vocab()
    for padding in (False, True):
        plain.pad_to_max_length = full.pad_to_max_length = padding
        a, b = plain.tokenize(TEXTS), full.tokenize(TEXTS)
        assert set(a) <= set(b) and all(torch.equal(a[k], b[k]) for k in a)
    np.testing.assert_allclose(plain.encode(TEXTS, batch_size=4), full.encode(TEXTS, batch_size=4), atol=2e-6)


def test_mean_pooling_and_dropout_follow_train_mode(tiny_bert_path):
    plain, full = _both(tiny_bert_path, pooling="mean")
    np.testing.assert_allclose(plain.encode(TEXTS), full.encode(TEXTS), atol=2e-6)
    plain.model.train()
    batch = plain.tokenize(TEXTS[:3])
    torch.manual_seed(0)
    assert not torch.equal(plain.forward(batch), plain.forward(batch))  # dropout is on in train mode
    plain.model.eval()
    assert torch.equal(plain.forward(batch), plain.forward(batch))


@pytest.mark.parametrize("slots", ["exact", "padded"])
def test_packed_forward_is_the_padded_forward(tiny_bert_path, slots):
    """Texts packed end to end (``Packing``) give the padded batch's hidden states, each text attending
    to its own real tokens only; ``first_only`` gives the [CLS] rows alone. ``padded``: every text
    holds the widest's slots, its padding included (annotate's one-width passes)."""
    model, tokenizer = load_bert(tiny_bert_path)
    batch = tokenizer(TEXTS[:4] + TEXTS[6:8], max_length=12)
    lengths = batch["attention_mask"].sum(1).tolist()
    widths = lengths if slots == "exact" else [batch["input_ids"].shape[1]] * len(lengths)
    packed = {k: torch.cat([v[i, :w] for i, w in enumerate(widths)]) for k, v in batch.items()}
    packing = Packing(widths, packed["attention_mask"])
    assert packing.mask.tolist() == batch["attention_mask"][:, : max(widths)].tolist()
    with torch.inference_mode():
        padded = model(**batch).last_hidden_state
        hidden = packing.pad(model.forward_packed(packed["input_ids"], packed["token_type_ids"], packing))
        first = model.forward_packed(packed["input_ids"], packed["token_type_ids"], packing, first_only=True)
    for i, n in enumerate(lengths):
        torch.testing.assert_close(hidden[i, :n], padded[i, :n], atol=2e-6, rtol=0)
    torch.testing.assert_close(first, padded[:, 0], atol=2e-6, rtol=0)
    assert torch.equal(packing.unpad(packing.pad(packed["input_ids"][:, None]))[:, 0], packed["input_ids"])


def test_passes_hold_at_most_the_rows_and_tokens_given_and_one_width_where_asked():
    widths = [3, 3, 5, 5, 5, 9, 9, 30]
    assert list(passes(widths, 3, max_tokens=12)) == [slice(0, 3), slice(3, 5), slice(5, 6), slice(6, 7), slice(7, 8)]
    assert list(passes(widths, 4)) == [slice(0, 4), slice(4, 8)]
    assert list(passes(widths, 2, one_width=True)) == [slice(0, 2), slice(2, 4), slice(4, 5), slice(5, 7), slice(7, 8)]
    assert list(passes([], 4, max_tokens=10)) == []


def test_saved_folder_loads_in_transformers_with_the_same_fingerprint(tiny_bert_path, tmp_path):
    plain, _ = _both(tiny_bert_path)
    plain.save(tmp_path / "saved")
    again = SapEncoder.load(tmp_path / "saved", device="cpu", precision="fp32", plain_bert=False)
    assert again.fingerprint == plain.fingerprint
    np.testing.assert_allclose(again.encode(TEXTS[:4]), plain.encode(TEXTS[:4]), atol=2e-6)


def test_other_models_fall_back_to_transformers(tiny_bert_path, tmp_path):
    folder = tmp_path / "relative"
    shutil.copytree(tiny_bert_path, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "position_embedding_type": "relative_key"}))
    assert load_bert(folder) is None
    assert not isinstance(SapEncoder.load(folder, device="cpu").model, BertEncoder)
    with pytest.raises(ValueError, match="not a BERT folder"):
        SapEncoder.load(folder, device="cpu", plain_bert=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").unlink()  # a slow-tokenizer-only folder
    assert load_bert(folder) is None


def test_loading_and_encoding_import_no_transformers_model_code(tiny_bert_path):
    code = (
        "import sys; from spacy_sapbert.encoder import SapEncoder; "
        f"e = SapEncoder.load({str(tiny_bert_path)!r}, device='cpu'); e.encode(['heart attack']); "
        "print(sorted(m for m in sys.modules if m.startswith(('transformers', 'torch.distributed.tensor', 'sympy'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_minilm_matches_transformers():
    plain, full = _both(None)
    assert isinstance(plain.model, BertEncoder) and plain.fingerprint == full.fingerprint
    a, b = plain.tokenize(TEXTS), full.tokenize(TEXTS)
    assert all(torch.equal(a[k], b[k]) for k in a)
    np.testing.assert_allclose(plain.encode(TEXTS), full.encode(TEXTS), atol=1e-5)
