"""The int8 encoder: SmoothQuant smoothing, per-channel quantisation, calibration (``spacy_sapbert/int8.py``)."""
import json

import numpy as np
import pytest
import torch

from spacy_sapbert import int8
from spacy_sapbert.encoder import SapEncoder, inference_copy


def _outlier_inputs(n: int = 512, dim: int = 32) -> torch.Tensor:
    """Inputs like a BERT's: most channels small, two of them tens of times larger."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, dim, generator=g)
    x[:, 3] *= 60.0
    x[:, 17] *= 25.0
    return x


def test_smoothing_shrinks_the_int8_error_of_outlier_channels():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 16))
    x = _outlier_inputs()
    exact = model(x).detach()
    maxima = int8.activation_maxima(model, lambda: model(x))
    smoothed = int8.smoothed_int8(model, maxima)
    from torch.ao.quantization import quantize_dynamic

    plain = quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    with torch.inference_mode():
        error_smoothed = (smoothed(x) - exact).norm() / exact.norm()
        error_plain = (plain(x) - exact).norm() / exact.norm()
    assert isinstance(smoothed[0], int8.SmoothedLinear)
    assert error_smoothed < 0.5 * error_plain and error_smoothed < 0.02
    assert torch.equal(model(x).detach(), exact)  # the model itself is unchanged


def test_linear_layers_without_calibration_stay_fp32():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    maxima = {"0": torch.ones(8)}
    smoothed = int8.smoothed_int8(model, maxima)
    assert isinstance(smoothed[0], int8.SmoothedLinear) and type(smoothed[2]) is torch.nn.Linear


def test_activation_maxima_are_the_inputs_maxima_and_leave_the_model_as_it_was():
    model = torch.nn.Sequential(torch.nn.Linear(32, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))
    model.train()
    x = _outlier_inputs(64)
    maxima = int8.activation_maxima(model, lambda: model(x))
    assert set(maxima) == {"0", "2"}
    torch.testing.assert_close(maxima["0"], x.abs().amax(0))
    hidden = model[0](x).detach()  # dropout off during calibration: the second layer saw these
    torch.testing.assert_close(maxima["2"], hidden.abs().amax(0))
    assert model.training and not any(m._forward_hooks for m in model.modules())


def test_shipped_calibration_names_and_a_bad_file(tmp_path):
    data = json.loads(int8.CALIBRATION_FILE.read_text(encoding="utf8"))
    assert len(int8.calibration_texts()) == len(data["names"]) == 1000
    assert "MeSH" in data["source"] and "public domain" in data["licence"]
    bad = tmp_path / "calibration.json"
    bad.write_text(json.dumps({"names": ["asthma", ""]}), encoding="utf8")
    with pytest.raises(ValueError, match="calibration.json"):
        int8.calibration_texts(bad)


def test_int8_needs_calibration_and_the_encoder_calibrates_once(tiny_bert_path, monkeypatch):
    with pytest.raises(ValueError, match="maxima"):
        inference_copy(torch.nn.Sequential(torch.nn.Linear(4, 4)), "int8", torch.device("cpu"))
    monkeypatch.setattr(int8, "calibration_texts", lambda: ["heart attack", "asthma", "chronic kidney disease"] * 10)
    encoder = SapEncoder.load(tiny_bert_path, device="cpu", precision="int8")
    calls = []
    original = encoder._calibration_maxima
    monkeypatch.setattr(encoder, "_calibration_maxima", lambda: calls.append(1) or original())
    names = ["heart attack", "asthma"]
    first, again = encoder.encode(names), encoder.encode(names)
    np.testing.assert_array_equal(first, again)
    assert calls == [1]
    assert any(isinstance(m, int8.SmoothedLinear) for m in encoder._model_for_inference().modules())


def test_maxima_are_measured_once_kept_and_remeasured_when_the_file_does_not_fit(tmp_path):
    path = int8.maxima_file("f" * 64, tmp_path)
    assert path.parent == tmp_path / "int8"
    calls = []
    maxima = {"0": torch.tensor([1.0, 2.0, 3.0])}

    def compute():
        calls.append(1)
        return maxima

    first = int8.cached_maxima(path, {"0": 3}, compute)
    again = int8.cached_maxima(path, {"0": 3}, compute)
    assert len(calls) == 1 and torch.equal(first["0"], again["0"])
    int8.cached_maxima(path, {"0": 4}, compute)  # another model's layer widths: measured again
    path.write_bytes(b"not a zip")
    int8.cached_maxima(path, {"0": 3}, compute)  # damaged: measured again, and written anew
    assert len(calls) == 3 and torch.equal(int8.cached_maxima(path, {"0": 3}, compute)["0"], maxima["0"]) and len(calls) == 3


def test_an_int8_encoder_pickles_with_its_quantised_copy(tiny_bert_path):
    """Spawned ``nlp.pipe`` workers get the encoder pickled, its calibrated int8 copy with it."""
    import pickle

    encoder = SapEncoder.load(tiny_bert_path, device="cpu", precision="int8")
    names = ["heart attack", "asthma"]
    before = encoder.encode(names)
    again = pickle.loads(pickle.dumps(encoder))
    np.testing.assert_array_equal(again.encode(names), before)
