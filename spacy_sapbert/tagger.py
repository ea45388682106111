"""The ``sapbert_ner`` component: a BERT encoder fine-tuned as a token tagger (BIO tags per label).

Why our own and not spacy-transformers or spacy-curated-transformers: see the README's *Mention
detection* section (measured by ``benchmarks/ner_libraries.py``). It runs on ``bert.BertEncoder``
(no transformers import at load time) and reads wordpieces with the ``tokenizers`` library.

Long texts: the doc's wordpieces are cut into overlapping windows; each token takes its tag scores
from the window where it sits furthest from an edge, and BIO tags are decoded (Viterbi, no I- without
its B-) over the whole doc at once, so an entity is never cut at a window edge.

On disk the weights are fp16 safetensors. The word-embedding matrix, frozen in training, is left out
when it is still the base encoder's own (the default MiniLM package's, say): it is read from that
folder at load time and checked against the sha256 recorded with the tagger.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc, Span
from spacy.training import Example
from torch import nn

from .bert import TOKENIZER_FILE, BertEncoder, load_bert, read_bert_config
from .encoder import (
    DEFAULT_ENCODER,
    fixed_passes,
    inference_copy,
    passes,
    resolve_encoder_path,
    resolve_precision,
    select_device,
)
from .fileio import atomic_path, folder_from_bytes, folder_to_bytes, read_json, write_json
from .overlap import pipe_predicted
from .scoring import ENTS_SCORE_WEIGHTS

TAGGER_FILE = "tagger.json"
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TAGGER_FORMAT = "spacy-sapbert-tagger-v1"
BYTES_FORMAT = "spacy-sapbert-tagger-bytes-v1"
WORD_EMBEDDINGS = "bert.embeddings.word_embeddings.weight"
OUTSIDE = "O"
PAD_MULTIPLE = 16  # windows are padded to their length rounded up to this (``tag_scores``)
TagSpan = Tuple[int, int, str]  # token start, token end, label


# ---------------------------------------------------------------------------- tags and decoding
def bio_tags(labels: Sequence[str]) -> List[str]:
    """``O``, then ``B-`` and ``I-`` of each label."""
    return [OUTSIDE] + [f"{prefix}-{label}" for label in labels for prefix in ("B", "I")]


def allowed_transitions(tags: Sequence[str]) -> np.ndarray:
    """``[len(tags) + 1, len(tags)]``: may tag ``j`` follow tag ``i`` (the last row: the start)?
    An ``I-X`` only follows ``B-X`` or ``I-X``."""
    n = len(tags)
    allowed = np.ones((n + 1, n), dtype=bool)
    for j, tag in enumerate(tags):
        if tag.startswith("I-"):
            allowed[:, j] = False
            allowed[tags.index("B-" + tag[2:]), j] = True
            allowed[j, j] = True
    return allowed


def viterbi(scores: np.ndarray, allowed: np.ndarray) -> List[int]:
    """The best tag sequence under ``allowed`` for per-token log-probabilities ``scores`` [n, tags]."""
    n, n_tags = scores.shape
    if n == 0:
        return []
    penalty = np.where(allowed, 0.0, -np.inf)
    best = scores[0] + penalty[n_tags]
    back = np.zeros((n, n_tags), dtype=np.int64)
    for i in range(1, n):
        paths = best[:, None] + penalty[:n_tags]  # [from, to]
        back[i] = paths.argmax(0)
        best = paths.max(0) + scores[i]
    path = [int(best.argmax())]
    for i in range(n - 1, 0, -1):
        path.append(int(back[i, path[-1]]))
    return path[::-1]


def tag_spans(path: Sequence[int], tags: Sequence[str]) -> List[TagSpan]:
    """Spans ``(start, end, label)`` over positions of a BIO tag sequence."""
    spans: List[TagSpan] = []
    start, label = -1, ""
    for i, t in enumerate(path):
        tag = tags[t]
        if tag.startswith("I-") and start >= 0 and tag[2:] == label:
            continue
        if start >= 0:
            spans.append((start, i, label))
            start = -1
        if tag != OUTSIDE:
            start, label = i, tag[2:]
    if start >= 0:
        spans.append((start, len(path), label))
    return spans


# ---------------------------------------------------------------------------- windows
@dataclass
class Window:
    """A stretch of one doc's wordpieces the encoder reads at once, and the tokens it tags."""

    doc: int  # the doc's position in the batch
    ids: List[int]  # [CLS] pieces [SEP]
    tokens: List[int]  # doc tokens whose tag scores this window gives
    rows: List[int]  # their first wordpiece's row in ``ids``


def window_bounds(n_pieces: int, capacity: int, overlap: int) -> List[Tuple[int, int, int, int]]:
    """``(start, end, own_start, own_end)`` per window over ``n_pieces`` wordpieces: windows of
    ``capacity`` pieces overlapping by at least ``overlap``; each piece is owned by exactly one
    window, the one where it sits furthest from an inner edge (the middle of each overlap)."""
    if n_pieces <= capacity:
        return [(0, n_pieces, 0, n_pieces)]
    stride = capacity - overlap
    starts = list(range(0, n_pieces - capacity, stride)) + [n_pieces - capacity]
    cuts = [0] + [(starts[k + 1] + starts[k] + capacity) // 2 for k in range(len(starts) - 1)] + [n_pieces]
    return [(s, s + capacity, cuts[k], cuts[k + 1]) for k, s in enumerate(starts)]


def doc_windows(doc_index: int, pieces: Sequence[int], first_piece: Sequence[int], capacity: int, overlap: int,
                cls_id: int, sep_id: int) -> List[Window]:
    """The windows of one doc: ``pieces`` its wordpiece ids, ``first_piece[t]`` token t's first
    piece (-1: the token has none, e.g. whitespace, and gets no tag)."""
    bounds = window_bounds(len(pieces), capacity, overlap)
    windows = [Window(doc_index, [cls_id, *pieces[s:e], sep_id], [], []) for s, e, _, _ in bounds]
    k = 0
    for token, piece in enumerate(first_piece):
        if piece < 0:
            continue
        while piece >= bounds[k][3]:
            k += 1
        windows[k].tokens.append(token)
        windows[k].rows.append(piece - bounds[k][0] + 1)
    return [w for w in windows if w.tokens]


# ---------------------------------------------------------------------------- the model
class TaggerModel(nn.Module):
    """BERT, dropout, and a linear layer giving one score per tag for every wordpiece."""

    def __init__(self, bert: BertEncoder, n_tags: int):
        super().__init__()
        self.bert = bert
        self.dropout = nn.Dropout(bert.config.hidden_dropout_prob)
        self.classifier = nn.Linear(bert.config.hidden_size, n_tags)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids, attention_mask).last_hidden_state
        return self.classifier(self.dropout(hidden))


def tensor_sha256(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes()).hexdigest()


def _word_embeddings_of(folder: Path) -> torch.Tensor:
    """The word-embedding matrix of a BERT folder's safetensors weights."""
    from safetensors import safe_open

    with safe_open(str(folder / WEIGHTS_FILE), "pt") as f:
        for key in ("embeddings.word_embeddings.weight", "bert.embeddings.word_embeddings.weight"):
            if key in f.keys():
                return f.get_tensor(key).float()
    raise ValueError(f"{folder / WEIGHTS_FILE}: no word-embedding matrix (embeddings.word_embeddings.weight)")


def wordpiece_tokenizer(folder: Path):
    """A ``tokenizers.Tokenizer`` of its own for the folder (no truncation or padding set on it)."""
    from tokenizers import Tokenizer

    if (folder / TOKENIZER_FILE).is_file():
        tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
    else:  # a vocab.txt-only folder: transformers converts it to a fast tokenizer
        from transformers import AutoTokenizer

        tokenizer = Tokenizer.from_str(AutoTokenizer.from_pretrained(str(folder), local_files_only=True).backend_tokenizer.to_str())
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


# ---------------------------------------------------------------------------- the component
@Language.factory(
    "sapbert_ner",
    assigns=["doc.ents"],
    default_config={
        "encoder": None,
        "max_length": 512,
        "overlap": 128,
        "batch_size": 16,
        "outside_bias": 0.0,
        "device": "auto",
        "precision": "auto",
        "scorer": {"@scorers": "spacy.ner_scorer.v1"},
    },
    default_score_weights=ENTS_SCORE_WEIGHTS,
)
def make_sapbert_ner(
    nlp: Language,
    name: str,
    encoder: Optional[str],
    max_length: int,
    overlap: int,
    batch_size: int,
    outside_bias: float,
    device: str,
    precision: str,
    scorer: Optional[Callable],
) -> "TransformerTagger":
    """``encoder``: the local BERT folder ``initialize`` starts from (None: the offline MiniLM).
    ``max_length``: wordpieces per window, [CLS] and [SEP] included; ``overlap``: wordpieces two
    windows share at least. ``batch_size``: windows per encoder call. ``outside_bias``: added to
    every token's log-probability of ``O`` before decoding: above 0 trades recall for precision.
    ``precision``: auto (bf16 where it is faster than fp32: ``fast_bf16``), fp32 or bf16."""
    return TransformerTagger(nlp.vocab, name, encoder=encoder, max_length=max_length, overlap=overlap,
                             batch_size=batch_size, outside_bias=outside_bias, device=device, precision=precision,
                             scorer=scorer)


class TransformerTagger(Pipe):
    """Sets ``doc.ents`` from a fine-tuned BERT's BIO tags (entities already set are kept)."""

    def __init__(
        self,
        vocab,
        name: str = "sapbert_ner",
        *,
        encoder: Optional[str] = None,
        max_length: int = 512,
        overlap: int = 128,
        batch_size: int = 16,
        outside_bias: float = 0.0,
        device: str = "auto",
        precision: str = "auto",
        scorer: Optional[Callable] = None,
    ):
        if max_length < 4:
            raise ValueError(f"max_length must be at least 4 wordpieces, got {max_length}")
        if not 0 <= overlap < max_length - 2:
            raise ValueError(f"overlap must be at least 0 and below max_length - 2 ({max_length - 2}), got {overlap}")
        if precision not in ("auto", "fp32", "bf16"):
            raise ValueError(f"precision must be auto, fp32 or bf16, got {precision!r}")
        self.vocab = vocab
        self.name = name
        self.encoder = encoder
        self.max_length = max_length
        self.overlap = overlap
        self.batch_size = batch_size
        # None: windows of one width share passes of up to ``batch_size``. N: every pass holds exactly N
        # windows (``encoder.fixed_passes``), so a doc's entities no longer depend on the docs beside it.
        self.pass_windows: Optional[int] = None
        self.outside_bias = outside_bias
        self.device = select_device(device)
        self.precision = resolve_precision(precision, self.device)
        self.scorer = scorer
        self._labels: Tuple[str, ...] = ()
        self.model: Optional[TaggerModel] = None
        self.base: Dict[str, str] = {}  # the encoder it was fine-tuned from and its word embeddings' sha256
        self._wordpieces = None
        self._special: Tuple[int, int, int] = (0, 0, 0)  # [CLS], [SEP], [PAD]
        self._inference: Optional[Tuple[Tuple[int, int], nn.Module]] = None

    @property
    def labels(self) -> Tuple[str, ...]:
        """The entity labels it tags (set by ``initialize`` or a trained model)."""
        return self._labels

    @property
    def tags(self) -> List[str]:
        return bio_tags(self._labels)

    # ------------------------------------------------------------------ set-up
    def initialize(
        self,
        get_examples: Optional[Callable[[], Iterable[Example]]] = None,
        *,
        nlp: Optional[Language] = None,
        labels: Optional[Sequence[str]] = None,
    ) -> None:
        """Start from the base encoder (``encoder``) with a fresh tag layer. The labels come from
        ``labels`` (``[initialize.components.<name>.labels]``) or else the examples' entities."""
        if labels is None and get_examples is not None:
            labels = sorted({e.label_ for eg in get_examples() for e in eg.reference.ents})
        if not labels:
            raise ValueError(f"{self.name}: no labels to tag; pass labels, or examples with entities")
        folder = resolve_encoder_path(self.encoder)
        loaded = load_bert(folder)
        if loaded is None:
            raise ValueError(f"{folder}: sapbert_ner fine-tunes BERT-architecture encoders (absolute positions, "
                             "fp32 safetensors weights, a WordPiece tokenizer) only")
        bert = loaded[0]
        if hasattr(bert, "pooler"):
            del bert.pooler  # unused by tagging
        name = str(self.encoder) if self.encoder not in (None, DEFAULT_ENCODER) else DEFAULT_ENCODER
        base = {"encoder": name, "word_embeddings_sha256": tensor_sha256(bert.embeddings.word_embeddings.weight)}
        self._attach(TaggerModel(bert, len(bio_tags(labels))).train(), tuple(labels), wordpiece_tokenizer(folder), base)

    def _attach(self, model: TaggerModel, labels: Tuple[str, ...], wordpieces, base: Dict[str, str]) -> None:
        if model.classifier.out_features != len(bio_tags(labels)):
            raise ValueError(f"{self.name}: {model.classifier.out_features} tag scores for {len(bio_tags(labels))} tags")
        self.model = model.to(self.device)
        self._labels = labels
        self.base = base
        self._wordpieces = wordpieces
        ids = [wordpieces.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]")]
        if any(i is None for i in ids):
            raise ValueError(f"{self.name}: the tokenizer lacks [CLS], [SEP] or [PAD]")
        self._special = (ids[0], ids[1], ids[2])
        self._inference = None

    def _ready(self) -> TaggerModel:
        if self.model is None:
            raise ValueError(f"{self.name}: not initialised; call nlp.initialize() or load a trained pipeline")
        return self.model

    # ------------------------------------------------------------------ windows
    def windows(self, docs: Sequence[Doc]) -> List[Window]:
        """The encoder windows of ``docs``; training reads the same windows the predictions use."""
        self._ready()
        assert self._wordpieces is not None
        cls_id, sep_id, _ = self._special
        words = [[t.text for t in doc] for doc in docs]
        encodings = self._wordpieces.encode_batch(words, is_pretokenized=True, add_special_tokens=False)
        out: List[Window] = []
        for i, (doc_words, enc) in enumerate(zip(words, encodings)):
            first = [-1] * len(doc_words)
            for pos, word in enumerate(enc.word_ids):
                if word is not None and first[word] < 0:
                    first[word] = pos
            out.extend(doc_windows(i, enc.ids, first, self.max_length - 2, self.overlap, cls_id, sep_id))
        return out

    def batch_tensors(self, windows: Sequence[Window], width: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Input ids and attention mask of ``windows``, padded to ``width`` (default: the longest)."""
        length = width or max(len(w.ids) for w in windows)
        ids = torch.full((len(windows), length), self._special[2], dtype=torch.long)
        mask = torch.zeros((len(windows), length), dtype=torch.long)
        for b, w in enumerate(windows):
            ids[b, : len(w.ids)] = torch.tensor(w.ids)
            mask[b, : len(w.ids)] = 1
        return ids.to(self.device), mask.to(self.device)

    # ------------------------------------------------------------------ predicting
    def _inference_model(self) -> nn.Module:
        """The weights at ``precision``, copied once per weight version (training changes them)."""
        model = self._ready()
        key = (id(model), sum(p._version for p in model.parameters()))
        if self._inference is None or self._inference[0] != key:
            model.eval()
            self._inference = (key, inference_copy(model, self.precision, self.device) if self.precision == "bf16" else model)
        return self._inference[1]

    @torch.inference_mode()
    def predict(self, docs: Sequence[Doc]) -> List[List[TagSpan]]:
        """Per doc, the entity spans ``(token start, token end, label)``."""
        return self.decode(self.tag_scores(docs))

    @torch.inference_mode()
    def tag_scores(self, docs: Sequence[Doc]) -> List[np.ndarray]:
        """Per doc, ``[len(doc), tags]`` log-probabilities, NaN for tokens without wordpieces."""
        model = self._inference_model()
        model.eval()
        windows = self.windows(docs)
        scores = [np.full((len(doc), len(self.tags)), np.nan, dtype=np.float32) for doc in docs]
        # each window padded to its own length rounded up to PAD_MULTIPLE, batched with windows of that
        # width; with ``pass_windows``, in passes of exactly that many (see SapEncoder.encode)
        windows.sort(key=lambda w: len(w.ids))
        widths = [-(-len(w.ids) // PAD_MULTIPLE) * PAD_MULTIPLE for w in windows]
        for part in passes(widths, self.pass_windows or self.batch_size, one_width=True):
            batch = windows[part]
            ids, mask = self.batch_tensors(batch, widths[part.start])
            padded = fixed_passes({"ids": ids, "mask": mask}, self.pass_windows)
            logits = model(padded["ids"], padded["mask"])[: len(batch)]
            logp = torch.log_softmax(logits.float(), dim=-1).cpu().numpy()
            for b, w in enumerate(batch):
                scores[w.doc][w.tokens] = logp[b, w.rows]
        return scores

    def decode(self, scores: Sequence[np.ndarray]) -> List[List[TagSpan]]:
        """The BIO spans of each doc's tag scores (``outside_bias`` added to ``O``); tokens without
        wordpieces (whitespace) are skipped, so an entity may run across them."""
        allowed = allowed_transitions(self.tags)
        outside = self.tags.index(OUTSIDE)
        out = []
        for doc_scores in scores:
            positions = np.flatnonzero(~np.isnan(doc_scores[:, 0]))
            tagged = doc_scores[positions].copy()
            tagged[:, outside] += self.outside_bias
            path = viterbi(tagged, allowed)
            out.append([(int(positions[s]), int(positions[e - 1]) + 1, label) for s, e, label in tag_spans(path, self.tags)])
        return out

    def set_annotations(self, docs: Sequence[Doc], spans: Sequence[Sequence[TagSpan]]) -> None:
        for doc, doc_spans in zip(docs, spans):
            preset = list(doc.ents)
            taken = {i for e in preset for i in range(e.start, e.end)}
            new = [Span(doc, s, e, label=label) for s, e, label in doc_spans if not taken.intersection(range(s, e))]
            doc.ents = sorted(preset + new, key=lambda s: s.start)

    def __call__(self, doc: Doc) -> Doc:
        self.set_annotations([doc], self.predict([doc]))
        return doc

    def pipe(self, stream: Iterable[Doc], batch_size: int = 128) -> Iterator[Doc]:
        """Tag ``stream`` a batch of docs at a time (their windows share encoder batches); a batch
        that raises goes to the error handler (``nlp.set_error_handler``)."""
        return pipe_predicted(self, stream, batch_size)

    # ------------------------------------------------------------------ serialization
    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        """``tagger.json`` (labels, base encoder), ``config.json``, ``tokenizer.json`` and fp16
        weights; the word embeddings only where they are not the base encoder's own."""
        model = self._ready()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        from safetensors.torch import save_file

        tensors = {k: v.detach().to("cpu", torch.float16).contiguous() for k, v in model.state_dict().items()}
        shared = tensor_sha256(model.state_dict()[WORD_EMBEDDINGS]) == self.base.get("word_embeddings_sha256")
        if shared:
            del tensors[WORD_EMBEDDINGS]
        with atomic_path(path / WEIGHTS_FILE) as tmp:
            save_file(tensors, str(tmp), metadata={"format": "pt"})
        write_json(path / CONFIG_FILE, model.bert.config.to_dict())
        assert self._wordpieces is not None
        with atomic_path(path / TOKENIZER_FILE) as tmp:
            tmp.write_text(self._wordpieces.to_str(), encoding="utf8")
        write_json(path / TAGGER_FILE, {"format": TAGGER_FORMAT, "labels": list(self.labels), "base": self.base,
                                        "word_embeddings_stored": not shared})

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "TransformerTagger":
        from safetensors.torch import load_file

        path = Path(path)
        meta = read_json(path / TAGGER_FILE)
        if meta.get("format") != TAGGER_FORMAT:
            raise ValueError(f"{path / TAGGER_FILE}: not a sapbert_ner tagger ({TAGGER_FORMAT})")
        config = read_bert_config(path)
        if config is None:
            raise ValueError(f"{path / CONFIG_FILE}: not a BERT configuration sapbert_ner can run")
        model = TaggerModel(BertEncoder(config, with_pooler=False), len(bio_tags(meta["labels"])))
        tensors = {k: v.float() for k, v in load_file(str(path / WEIGHTS_FILE)).items()}
        base = meta["base"]
        if WORD_EMBEDDINGS not in tensors:
            folder = resolve_encoder_path(base["encoder"])
            embeddings = _word_embeddings_of(folder)
            if tensor_sha256(embeddings) != base["word_embeddings_sha256"]:
                raise ValueError(
                    f"{path}: this tagger reads its word embeddings from the encoder {base['encoder']!r} ({folder}), "
                    "but that folder's embeddings are not the ones it was trained with (sha256 differs); "
                    "install the encoder it was trained on, or save the tagger with its embeddings"
                )
            tensors[WORD_EMBEDDINGS] = embeddings
        model.load_state_dict(tensors, strict=True)
        self._attach(model, tuple(meta["labels"]), wordpiece_tokenizer(path), base)
        return self

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        return folder_to_bytes(lambda root: self.to_disk(root, exclude=exclude), BYTES_FORMAT)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "TransformerTagger":
        return folder_from_bytes(bytes_data, BYTES_FORMAT, lambda root: self.from_disk(root, exclude=exclude), "sapbert_ner")

