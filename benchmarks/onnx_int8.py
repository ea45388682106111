"""ONNX Runtime int8, measured beside torch's precisions by ``benchmarks/speed.py``.

Not a runtime option of the plugin: on the CPU measured here it encoded fewer names/s than torch
bf16 and moved the vectors further from fp32 than torch int8 (see the README's SPEED block).
Needs ``pip install onnxruntime onnx``; ``speed.py`` skips the row without them. ONNX Runtime picks
its int8 kernels (AVX2, AVX512-VNNI, AMX) from the CPU itself, with no variable to cap them, so
``speed.py --isa avx2`` cannot show this row as an AVX2-only CPU would run it (torch's int8 row it can:
``FBGEMM_ENABLE_INSTRUCTIONS``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from spacy_sapbert.encoder import SapEncoder


class _LastHidden(torch.nn.Module):
    """The transformer with keyword inputs and one tensor out, the shape ONNX export wants."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state


class OnnxInt8Encoder:
    """``encoder``'s fp32 weights exported to ONNX, dynamically quantised to int8 (weights QInt8),
    run by ONNX Runtime on ``threads`` CPU threads; tokenisation, pooling and normalisation are
    the encoder's own, so only the transformer differs."""

    def __init__(self, encoder: SapEncoder, work_dir: Path, threads: int = 1):
        import onnxruntime as ort
        from onnxruntime.quantization import QuantType, quantize_dynamic

        self.encoder = encoder
        work_dir.mkdir(parents=True, exist_ok=True)
        fp32, int8 = work_dir / "model.onnx", work_dir / "model.int8.onnx"
        inputs = ("input_ids", "attention_mask", "token_type_ids")
        sample = encoder.tokenize(["heart attack", "asthma"])
        torch.onnx.export(
            _LastHidden(encoder.model.float().eval()), tuple(sample[k] for k in inputs), str(fp32),
            input_names=list(inputs), output_names=["hidden"], opset_version=17, dynamo=False,
            dynamic_axes={k: {0: "batch", 1: "tokens"} for k in (*inputs, "hidden")},
        )
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(int8), options, providers=["CPUExecutionProvider"])

    def encode(self, texts: Sequence[str], batch_size: int = 128) -> np.ndarray:
        out = np.zeros((len(texts), self.encoder.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # as SapEncoder.encode
        for start in range(0, len(texts), batch_size):
            idx = order[start : start + batch_size]
            batch = self.encoder.tokenize([texts[i] for i in idx])
            hidden = self.session.run(None, {k: v.numpy() for k, v in batch.items() if k != "special_tokens_mask"})[0]
            out[idx] = self.encoder.pool(torch.from_numpy(hidden), batch["attention_mask"]).numpy()
        return out
