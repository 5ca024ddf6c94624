"""Shared-prefix KV reuse for transformers causal LMs.

Every s3 prompt starts with the same ~570 tokens (the chat template's system turn, the Figure 11 instruction and its
loop example); a ~760-token first prompt leaves ~190 tokens that differ between questions. On a CPU the prompt forward
dominates a rollout, so the common prefix of a batch is computed ONCE (batch 1) and every row continues from its keys
and values. The same holds for the training forward: one micro-batch shares the prefix with gradients flowing into it
once, instead of once per row.

Exact, not approximate: the prefix occupies positions 0..P-1 of every row exactly as in a full forward, and padding
goes between the prefix and each row's own suffix (generation) or after the sequence (training), masked out either way
(tests/integration/test_policy_transformers.py compares logits, sampled tokens and gradients with the plain forward).

    P = common_prefix_len(rows, limit=min(len(r) for r in rows) - 1)
    cache = prefix_cache(model, rows[0][:P])                       # one forward of P tokens
    ids, att = pack_after_prefix(rows, P, pad_id)                  # [prefix][pads][row suffix], mask
    model.generate(input_ids=ids, attention_mask=att, **{cache_arg(model): expand(cache, len(rows))})
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence
from typing import Any

__all__ = ["MIN_SHARED_PREFIX", "cache_arg", "common_prefix_len", "expand", "pack_after_prefix", "prefix_cache"]

# below this many shared tokens the extra forward call costs more than it saves
MIN_SHARED_PREFIX = 32


def common_prefix_len(rows: Sequence[Sequence[int]], limit: int | None = None) -> int:
    """Length of the longest prefix shared by every row (at most `limit`).

    >>> common_prefix_len([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]])
    2
    >>> common_prefix_len([[1, 2, 3], [1, 2, 3]], limit=2)
    2
    """
    if not rows:
        return 0
    first = rows[0]
    n = min(len(r) for r in rows)
    if limit is not None:
        n = min(n, max(limit, 0))
    for other in rows[1:]:
        if n == 0:
            break
        if other[:n] == first[:n]:
            continue
        lo, hi = 0, n  # first[:lo] == other[:lo]; the first difference is before hi
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if other[:mid] == first[:mid]:
                lo = mid
            else:
                hi = mid - 1
        n = lo
    return n


def _base(model: Any) -> Any:
    get = getattr(model, "get_base_model", None)  # peft wrappers
    return get() if callable(get) else model


def cache_arg(model: Any) -> str:
    """The keyword a model's forward / generate takes its KV cache by: `cache` (transformers >= 5.x) or
    `past_key_values` (earlier releases)."""
    params = inspect.signature(type(_base(model)).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def output_cache(out: Any) -> Any:
    """The KV cache of a forward's output, whatever the transformers release calls it."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def prefix_cache(model: Any, prefix: Sequence[int]) -> Any:
    """The KV cache of `prefix` (one forward of the decoder stack, batch 1: no vocabulary projection, nothing reads
    the prefix's logits). Runs under whatever grad / autocast mode the caller set: with gradients on, the cache stays
    in the graph and the prefix is differentiated through once. LoRA layers live inside the decoder, so a peft model's
    adapters (or their disabled state) apply as in a full forward."""
    import torch

    device = next(model.parameters()).device
    ids = torch.tensor([list(prefix)], dtype=torch.long, device=device)
    get_decoder = getattr(_base(model), "get_decoder", None)
    if callable(get_decoder):
        return output_cache(get_decoder()(input_ids=ids, use_cache=True))
    return output_cache(model(input_ids=ids, use_cache=True, logits_to_keep=1))


def expand(cache: Any, rows: int, *, copy_first: bool = True) -> Any:
    """The batch-1 prefix cache repeated for `rows` rows. `copy_first=False` repeats in place (a cache used once, e.g.
    inside a differentiated forward); generation mutates the cache it is given, so it takes a copy."""
    c = copy.deepcopy(cache) if copy_first else cache
    c.batch_repeat_interleave(rows)
    return c


def pack_after_prefix(rows: Sequence[Sequence[int]], prefix_len: int, pad_id: int) -> tuple[Any, Any]:
    """(input_ids, attention_mask), each (B, P + S): the shared prefix, then each row's suffix left-padded to the
    longest suffix S. Positions follow the mask (generate derives them from its cumulative sum), so every row's
    suffix starts at position P exactly as in an unpadded forward."""
    import torch

    B = len(rows)
    S = max(len(r) - prefix_len for r in rows)
    ids = torch.full((B, prefix_len + S), pad_id, dtype=torch.long)
    att = torch.zeros((B, prefix_len + S), dtype=torch.long)
    if prefix_len:
        ids[:, :prefix_len] = torch.tensor(list(rows[0][:prefix_len]), dtype=torch.long)
        att[:, :prefix_len] = 1
    for b, r in enumerate(rows):
        suffix = list(r[prefix_len:])
        if suffix:
            ids[b, prefix_len + S - len(suffix) :] = torch.tensor(suffix, dtype=torch.long)
            att[b, prefix_len + S - len(suffix) :] = 1
    return ids, att
