"""An int8 copy of a flat index's vectors: the first pass of exact search where bf16 is slow.

On a CPU without fast bf16 (AVX2 alone, or AVX-512 without AMX) the flat index's fp32 matrix product
is most of a search's time. ``torch._int_mm`` multiplies int8 matrices into exact int32 sums faster
than fp32 there (the whole search, as AVX2: ``benchmarks/results/flat_search_avx2.json``, and the
figures beside ``INT8_MIN_NAMES`` in ``flat.py``).
An int8 score differs from the true one by at most a bound this module computes for each query
(``Int8Copy.quantize``). The k names with the best int8 scores are scored exactly first; the k-th
best of those exact scores is a floor under the true k-th best, so a name whose int8 score is more
than the bound below that floor cannot be in the top k, and only the others are scored exactly
(``FlatIndex.int8_search``): the same top k as exact search.

* Both sides are first turned by one random rotation (seeded): it spreads a few large coordinates
  (MiniLM's vectors have one near 0.9) over all of them, so that one scale fits every coordinate.
* Names share one scale, so that int8 scores of one query compare across names as integers; a
  query has its own.
* Names use the range -64..64 and queries -127..127: AVX2's int8 kernels add pairs of u8 × s8
  products in int16 (the query shifted to u8), which a name range of -127..127 overflows. The
  products are checked once a process on extreme values (``int8_products_exact``); where they are
  not exact, or ``torch._int_mm`` is missing, the index keeps searching in fp32.
"""
from __future__ import annotations

import functools
import platform
from typing import Tuple

import numpy as np

ROTATION_SEED = 0
NAME_LEVELS = 64
QUERY_LEVELS = 127
BLOCK = 65536  # names rotated and quantised at a time (working copies stay small at a million names)
KEEP_BYTES = 256 * 2**20  # up to this many bytes of turned names (170k at 384 dims) are turned once
# float32's unit roundoff and a little more (the rotation's float32 copy): a rotated coordinate of x is
# off by at most d·ROUNDING·|x|, the vector by √d times that
ROUNDING = 2.0**-24 * 1.01


@functools.lru_cache(maxsize=None)
def int8_products_exact() -> bool:
    """Whether ``torch._int_mm`` runs here (x86-64, where it was measured faster than fp32) and sums
    int8 products exactly at the ranges used: every sign pattern of pairs at the extremes, which is
    where an int16 intermediate would overflow. Constant while a process runs."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    import torch

    signs = torch.tensor([[1, 1], [1, -1], [-1, 1], [-1, -1]], dtype=torch.int8)
    queries = (signs.repeat(1, 32) * QUERY_LEVELS).repeat(8, 1)  # (32, 64)
    names = (signs.repeat(1, 32) * NAME_LEVELS).repeat(16, 1)  # (64, 64)
    try:
        product = torch._int_mm(queries, names.T)
    except (AttributeError, RuntimeError):
        return False
    return bool(torch.equal(product.long(), queries.long() @ names.long().T))


class Int8Copy:
    """The rotated, quantised names of one index, with the bounds that make int8 scores safe to filter by."""

    def __init__(self, vectors) -> None:
        """``vectors``: the index's (n, d) float32 vectors as a torch tensor (possibly mapped). The
        names are turned in float32 (the whole copy of MEDIC's 74,978 names: 0.37 s on one AVX2 thread in
        ``benchmarks/results/flat_search_avx2.json``; turned in float64 it took 1.6 s, ad hoc):
        that rounding, at most d·√d·2⁻²⁴·|x| (``ROUNDING``), is added to the name error."""
        import torch

        n, d = vectors.shape
        generator = torch.Generator().manual_seed(ROTATION_SEED)
        self.rotation = torch.linalg.qr(torch.randn(d, d, generator=generator, dtype=torch.float64))[0]
        turn = self.rotation.float()
        kept = n * d * 4 <= KEEP_BYTES  # the turned names kept between the two passes (else turned again)
        turned = [part @ turn for part in vectors.split(BLOCK)] if kept else None
        largest = max((float((part @ turn).abs().max()) for part in vectors.split(BLOCK)) if turned is None
                      else (float(part.abs().max()) for part in turned), default=0.0)
        self.scale = max(largest, 1e-30) / NAME_LEVELS
        self.codes = torch.empty(n, d, dtype=torch.int8)
        rounding = ROUNDING * d * d**0.5
        error = norm = 0.0
        for i, at in enumerate(range(0, n, BLOCK)):
            part = vectors[at : at + BLOCK]
            rotated = part @ turn if turned is None else turned[i]
            codes = rotated.mul(1 / self.scale).round_().clamp_(-NAME_LEVELS, NAME_LEVELS)
            self.codes[at : at + BLOCK] = codes.to(torch.int8)
            restored = codes.mul_(self.scale)
            norm = max(norm, float(restored.norm(dim=1).max()))
            off = rotated.sub_(restored).norm(dim=1)  # (the turned names are not needed again)
            error = max(error, float((off + rounding * part.norm(dim=1)).max()))
        # |true - int8 score| <= |q| * name_error + |q - q'| * name_norm (Cauchy-Schwarz, both sides
        # rounded); a relative 1e-5 covers the float32 norms and the rotation's float64 rounding.
        self.name_error = error * (1 + 1e-5) + 1e-9
        self.name_norm = norm * (1 + 1e-5) + 1e-9

    def quantize(self, queries) -> Tuple[object, np.ndarray, np.ndarray]:
        """(int8 codes (m, d); per query the score an int8 product of 1 is worth, and the bound on
        |true score - int8 score| in score units)."""
        import torch

        rotated = queries.double() @ self.rotation
        step = rotated.abs().amax(1).clamp_min(1e-30) / QUERY_LEVELS
        codes = torch.round(rotated / step[:, None])
        error = (rotated - codes * step[:, None]).norm(dim=1)
        bound = queries.double().norm(dim=1) * self.name_error + error * self.name_norm + 1e-9
        return codes.to(torch.int8), (step * self.scale).numpy(), bound.numpy()
