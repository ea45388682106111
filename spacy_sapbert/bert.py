"""A plain BERT encoder and its fast tokenizer, loaded without transformers' model code.

Importing ``transformers.models.bert`` pulls in torch.distributed, torch._dynamo, sympy, scipy
and accelerate: about four CPU-seconds before the first name is encoded, most of the time a
saved pipeline takes to load. Linking needs none of it: a BERT forward pass is a few lines of
torch, and the ``tokenizers`` library reads ``tokenizer.json`` directly.

``load_bert`` returns ``None`` for anything it does not reproduce exactly (another architecture,
relative positions, weights in another dtype or under other names, a tokenizer file that
disagrees with its config); ``SapEncoder.load`` then uses transformers. The module's parameter
names are transformers' ``BertModel``'s, so state dicts, fingerprints and saved folders are the same
either way (``tests/test_bert.py`` compares both).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch
from torch import nn

PathLike = Union[str, os.PathLike]
WEIGHTS = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_FILES = (TOKENIZER_FILE, "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
BERT_TOKENIZERS = (None, "BertTokenizer", "BertTokenizerFast")
ACTIVATIONS = {
    "gelu": nn.functional.gelu,
    "relu": nn.functional.relu,
    "gelu_new": lambda x: nn.functional.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: nn.functional.gelu(x, approximate="tanh"),
}
# checkpoint keys that are buffers, not weights (transformers drops them too)
IGNORED_KEYS = ("embeddings.position_ids", "embeddings.token_type_ids")


class BertConfig(SimpleNamespace):
    """``config.json`` as attributes (``hidden_size``, ...), written back unchanged on save."""

    def to_dict(self) -> Dict[str, Any]:
        return dict(vars(self))


class _Embeddings(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(  # given a tensor, not initialised at random: the checkpoint fills it
            c.vocab_size, c.hidden_size, padding_idx=getattr(c, "pad_token_id", 0), _weight=torch.empty(c.vocab_size, c.hidden_size)
        )
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``positions``: each token's place in its text (default: its column)."""
        if positions is None:
            positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None, :]
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions) + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))


class _SelfAttention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.heads = c.num_attention_heads
        self.query = nn.Linear(c.hidden_size, c.hidden_size)
        self.key = nn.Linear(c.hidden_size, c.hidden_size)
        self.value = nn.Linear(c.hidden_size, c.hidden_size)
        self.dropout_p = c.attention_probs_dropout_prob

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, n, self.heads, d // self.heads).transpose(1, 2)

        out = nn.functional.scaled_dot_product_attention(
            heads(self.query(x)), heads(self.key(x)), heads(self.value(x)), attn_mask=mask,
            dropout_p=self.dropout_p if self.training else 0.0,
        )
        return out.transpose(1, 2).reshape(b, n, d)

    def forward_packed(self, x: torch.Tensor, packing: Packing, first_only: bool) -> torch.Tensor:
        """``forward`` over packed tokens (T, d): each text's tokens attend to its own only. Keys and
        values come from every token; queries from every token, or with ``first_only`` from each
        text's first token alone (b, d)."""
        b, n, d = len(packing.widths), packing.n, x.shape[-1]

        def heads(t: torch.Tensor, rows: int) -> torch.Tensor:
            return t.view(b, rows, self.heads, d // self.heads).transpose(1, 2)

        queries = heads(self.query(x[packing.starts]), 1) if first_only else heads(packing.pad(self.query(x)), n)
        out = nn.functional.scaled_dot_product_attention(
            queries, heads(packing.pad(self.key(x)), n), heads(packing.pad(self.value(x)), n), attn_mask=packing.key_mask,
        )
        out = out.transpose(1, 2).reshape(b, -1, d)
        return out[:, 0] if first_only else packing.unpad(out)


class _Residual(nn.Module):
    """dense → dropout → LayerNorm(· + input): BERT's ``SelfOutput`` and ``Output``."""

    def __init__(self, c: BertConfig, d_in: int):
        super().__init__()
        self.dense = nn.Linear(d_in, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class _Attention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.self = _SelfAttention(c)
        self.output = _Residual(c, c.hidden_size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x, mask), x)


class _Intermediate(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)
        self.act = ACTIVATIONS[c.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))


class _Layer(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.attention = _Attention(c)
        self.intermediate = _Intermediate(c)
        self.output = _Residual(c, c.intermediate_size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)

    def forward_packed(self, x: torch.Tensor, packing: Packing, first_only: bool = False) -> torch.Tensor:
        """``forward`` over packed tokens; with ``first_only``, only each text's first token comes out."""
        attended = self.attention.self.forward_packed(x, packing, first_only)
        x = self.attention.output(attended, x[packing.starts] if first_only else x)
        return self.output(self.intermediate(x), x)


class _Encoder(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(_Layer(c) for _ in range(c.num_hidden_layers))


class _Pooler(nn.Module):
    """Unused by the encoder's pooling; kept so the weights (and the fingerprint) are the checkpoint's."""

    def __init__(self, c: BertConfig):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)


class BertEncoder(nn.Module):
    """transformers' ``BertModel`` forward (absolute positions, no cross-attention): ``last_hidden_state``."""

    def __init__(self, config: BertConfig, with_pooler: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = _Embeddings(config)
        self.encoder = _Encoder(config)
        if with_pooler:
            self.pooler = _Pooler(config)

    @property
    def dtype(self) -> torch.dtype:
        """The weights' dtype, as on transformers' models."""
        return next(self.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        **_: Any,
    ) -> SimpleNamespace:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids)
        mask = attention_mask[:, None, None, :].bool()  # keys a query may attend to
        for layer in self.encoder.layer:
            x = layer(x, mask)
        return SimpleNamespace(last_hidden_state=x)

    def forward_packed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, packing: Packing,
                       first_only: bool = False) -> torch.Tensor:
        """The last hidden states of texts packed end to end (``Packing``): (T, d), or with
        ``first_only`` each text's first ([CLS]) token's alone (b, d), whose last layer then computes
        only those rows (its keys and values excepted): [CLS] pooling reads nothing else. The same
        vectors as ``forward`` to within float rounding (``tests/test_bert.py``)."""
        x = self.embeddings(input_ids, token_type_ids, packing.positions)
        layers = self.encoder.layer
        for i, layer in enumerate(layers):
            x = layer.forward_packed(x, packing, first_only and i == len(layers) - 1)
        return x

    def save_pretrained(self, folder: PathLike, safe_serialization: bool = True) -> None:
        """``config.json`` and ``model.safetensors``, as transformers writes them (it loads them back)."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(self.config.to_dict(), indent=2) + "\n", encoding="utf8")
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(folder / WEIGHTS), metadata={"format": "pt"})


class Packing:
    """Where each of b texts lies in a pass packed end to end: text i holds ``widths[i]`` token slots,
    of which ``attention_mask`` marks the real tokens (padding is attended by no one).

    The Linear layers, nearly all of a short name's FLOPs, run over the T packed slots with no
    padding to the pass's widest text; attention alone sees the texts as a padded (b, n) block.
    """

    def __init__(self, widths: Sequence[int], attention_mask: torch.Tensor):
        device = attention_mask.device
        self.widths = torch.as_tensor(widths, dtype=torch.long, device=device)
        self.n = int(self.widths.max())
        b = len(self.widths)
        self.starts = torch.cumsum(self.widths, 0) - self.widths
        self.positions = torch.arange(int(self.widths.sum()), device=device) - torch.repeat_interleave(self.starts, self.widths)
        # one width: the packed slots already are the (b, n) block, row after row
        self._slots = None if bool((self.widths == self.n).all()) else (
            torch.repeat_interleave(torch.arange(b, device=device) * self.n, self.widths) + self.positions)
        self.mask = self.pad(attention_mask[:, None]).view(b, self.n)  # (b, n): 1 for each text's real tokens
        self.key_mask = self.mask.bool()[:, None, None, :]

    def pad(self, t: torch.Tensor) -> torch.Tensor:
        """Packed (T, d) → (b, n, d), zeros in the slots no text has."""
        b, d = len(self.widths), t.shape[-1]
        if self._slots is None:
            return t.view(b, self.n, d)
        block = t.new_zeros(b * self.n, d)
        block[self._slots] = t
        return block.view(b, self.n, d)

    def unpad(self, block: torch.Tensor) -> torch.Tensor:
        """(b, n, d) → packed (T, d)."""
        flat = block.reshape(-1, block.shape[-1])
        return flat if self._slots is None else flat[self._slots]


class BertTokenizer:
    """A ``tokenizers.Tokenizer`` called like transformers' fast tokenizer, for what the encoder asks."""

    def __init__(self, folder: PathLike, spec: Optional[str] = None):
        from tokenizers import Tokenizer

        self.folder = Path(folder)
        text = spec if spec is not None else (self.folder / TOKENIZER_FILE).read_text(encoding="utf8")
        self._tokenizer = Tokenizer.from_str(text)
        self.pad_token = (self._tokenizer.padding or {}).get("pad_token") or "[PAD]"
        self.pad_token_id = self._tokenizer.token_to_id(self.pad_token) or 0

    def __call__(
        self,
        texts: Sequence[str],
        padding: Union[bool, str] = True,
        truncation: bool = True,
        max_length: Optional[int] = None,
        return_tensors: str = "pt",
    ) -> Dict[str, torch.Tensor]:
        tok = self._tokenizer
        if truncation and max_length:
            tok.enable_truncation(max_length)
        else:
            tok.no_truncation()
        if padding == "max_length":
            tok.enable_padding(pad_id=self.pad_token_id, pad_token=self.pad_token, length=max_length)
        elif padding:
            tok.enable_padding(pad_id=self.pad_token_id, pad_token=self.pad_token)
        else:
            tok.no_padding()
        encoded = tok.encode_batch(list(texts))
        return {
            "input_ids": torch.tensor([e.ids for e in encoded], dtype=torch.long),
            "token_type_ids": torch.tensor([e.type_ids for e in encoded], dtype=torch.long),
            "attention_mask": torch.tensor([e.attention_mask for e in encoded], dtype=torch.long),
        }

    def get_vocab(self) -> Dict[str, int]:
        return self._tokenizer.get_vocab(with_added_tokens=True)

    def save_pretrained(self, folder: PathLike) -> None:
        """The tokenizer files it was loaded from, copied."""
        Path(folder).mkdir(parents=True, exist_ok=True)
        for name in TOKENIZER_FILES:
            if (self.folder / name).is_file():
                shutil.copyfile(self.folder / name, Path(folder) / name)


def _read_json(path: Path) -> Dict[str, Any]:
    with open(path, encoding="utf8") as f:
        return json.load(f)


def _tokenizer_spec(folder: Path) -> Optional[str]:
    """The text of a BERT WordPiece ``tokenizer.json`` whose lower-casing agrees with
    ``tokenizer_config.json`` (transformers follows the config where they differ), else None."""
    if not (folder / TOKENIZER_FILE).is_file():
        return None
    config = _read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
    if config.get("tokenizer_class") not in BERT_TOKENIZERS:
        return None
    text = (folder / TOKENIZER_FILE).read_text(encoding="utf8")
    spec = json.loads(text)
    normalizer = spec.get("normalizer") or {}
    if normalizer.get("type") != "BertNormalizer" or (spec.get("model") or {}).get("type") != "WordPiece":
        return None
    if "do_lower_case" in config and bool(config["do_lower_case"]) != bool(normalizer.get("lowercase")):
        return None
    if "strip_accents" in config and config["strip_accents"] != normalizer.get("strip_accents"):
        return None
    return text


def _model_supported(config: Dict[str, Any]) -> bool:
    return (
        config.get("model_type") == "bert"
        and config.get("position_embedding_type", "absolute") == "absolute"
        and config.get("hidden_act") in ACTIVATIONS
        and not config.get("is_decoder")
        and not config.get("add_cross_attention")
        and config.get("hidden_size", 0) % max(1, config.get("num_attention_heads", 1)) == 0
    )


def read_bert_config(folder: PathLike) -> Optional[BertConfig]:
    """``config.json`` of a BERT that ``BertEncoder`` reproduces, with transformers' defaults filled
    in, or None for any other model."""
    raw = _read_json(Path(folder) / "config.json")
    if not _model_supported(raw):
        return None
    config = BertConfig(**raw)
    for key, default in (("layer_norm_eps", 1e-12), ("type_vocab_size", 2), ("hidden_dropout_prob", 0.1),
                         ("attention_probs_dropout_prob", 0.1), ("pad_token_id", 0)):
        if not hasattr(config, key):
            setattr(config, key, default)
    return config


def _checkpoint(path: Path, expected: Sequence[str]) -> Optional[Dict[str, torch.Tensor]]:
    """The checkpoint's tensors under the module's names, or None if they are not exactly those (fp32)."""
    from safetensors.torch import load_file

    tensors = {k: v for k, v in load_file(str(path)).items() if k not in IGNORED_KEYS}
    if tensors and all(k.startswith("bert.") for k in tensors):
        tensors = {k[len("bert."):]: v for k, v in tensors.items()}
    if set(tensors) != set(expected) or any(v.dtype != torch.float32 for v in tensors.values()):
        return None
    return tensors


def load_bert(folder: PathLike) -> Optional[Tuple[BertEncoder, BertTokenizer]]:
    """The model and tokenizer of a local BERT folder, or None where transformers must load it."""
    folder = Path(folder)
    if not (folder / WEIGHTS).is_file() or not (folder / "config.json").is_file():
        return None
    tokenizer_spec = _tokenizer_spec(folder)
    if tokenizer_spec is None:
        return None
    config = read_bert_config(folder)
    if config is None:
        return None
    from safetensors import safe_open

    with safe_open(str(folder / WEIGHTS), "pt") as f:
        with_pooler = any(k.endswith("pooler.dense.weight") for k in f.keys())
    model = BertEncoder(config, with_pooler=with_pooler)  # on the CPU: a meta-device skeleton imports torch._dynamo
    tensors = _checkpoint(folder / WEIGHTS, list(model.state_dict()))
    if tensors is None:
        return None
    model.load_state_dict(tensors, strict=True, assign=True)
    return model.eval(), BertTokenizer(folder, tokenizer_spec)
