"""vcattn in sequence-parallel engines. Ring attention runs attention over
one chunk of the keys at a time and merges the partial outputs through their
log-sum-exp; vcattn returns the LSE of the caller's scores (natural log,
K smoothing added back), so partial results merge exactly as FlashAttention's.

- `xdit_attention`: xDiT's backend contract, [B, H, S, D] -> (out, lse [B, H, S]).
- `ring_forward`: yunchang's ring step contract, [B, S, H, D] -> (out, lse [B, H, S]).
- `yunchang_processor`: `ring_forward` for yunchang's USP layer (Ulysses
  all-to-all over heads, then a ring over key chunks)::

      from yunchang import LongContextAttention, set_seq_parallel_pg
      set_seq_parallel_pg(ulysses_degree, ring_degree, rank, world_size)
      attn = LongContextAttention(attn_type=None, attn_processor=vcattn.parallel.yunchang_processor("vc"))
      out = attn(q, k, v)  # this rank's [B, S / P, H, D] shards

  (yunchang 0.6 calls `attn_processor` when `attn_type` names none of its
  own kernels; python/tests/test_parallel.py runs both degrees.)
- `merge`: combines two partial results over disjoint key sets.

Each chunk is quantized (and, with a state, grouped) on its own; pass one
LayerState per (layer, chunk) to keep the grouping schedule per chunk.
"""
import functools

import torch

import vcattn


def merge(out_a, lse_a, out_b, lse_b, tensor_layout="HND"):
    """Attention over the union of two disjoint key sets from the two partial
    results: weights exp(lse_x - lse) with lse = logaddexp(lse_a, lse_b).
    Each LSE carries the score error of INT8 q and k (small for ordinary
    scores: 0.02 nats at unit-variance q, k and D 64; it grows with |q| |k|)
    and, under ExpCast (method "vc"), up to 0.074 nats more (the decoded
    bytes lie within [0.9290, 1.0746] of exp): the merge is as exact as the
    LSEs it is given (vcattn.h, vcattn_attention)."""
    lse = torch.logaddexp(lse_a, lse_b)
    wa, wb = torch.exp(lse_a - lse), torch.exp(lse_b - lse)
    if tensor_layout == "HND":
        wa, wb = wa.unsqueeze(-1), wb.unsqueeze(-1)
    else:  # [B, S, H, D] outputs, [B, H, S] weights
        wa, wb = wa.transpose(1, 2).unsqueeze(-1), wb.transpose(1, 2).unsqueeze(-1)
    out = out_a.float() * wa + out_b.float() * wb
    return out.to(out_a.dtype), lse


def _refuse(dropout_p, is_causal):
    if dropout_p:
        raise ValueError("vcattn: dropout is not supported (dropout_p must be 0)")
    if is_causal:
        raise NotImplementedError("vcattn: causal attention is not supported (V-Smooth reorders the keys)")


def xdit_attention(query, key, value, dropout_p=0.0, is_causal=False, attention_kwargs=None):
    """xDiT attention backend: [B, H, S, D] tensors, returns (output, lse)."""
    _refuse(dropout_p, is_causal)
    kwargs = dict(attention_kwargs or {})
    scale = kwargs.pop("softmax_scale", kwargs.pop("scale", None))
    method, state = kwargs.pop("method", "vc"), kwargs.pop("state", None)
    if kwargs.pop("attn_mask", None) is not None:
        raise ValueError("vcattn: attention masks are not supported")
    if kwargs:
        raise TypeError("vcattn: unsupported attention_kwargs %s" % sorted(kwargs))
    return vcattn.attention(query, key, value, tensor_layout="HND", sm_scale=scale, return_lse=True,
                            method=method, state=state, check_finite=False)


def ring_forward(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                 softcap=0.0, alibi_slopes=None, return_softmax=False, method="vc", state=None):
    """yunchang's per-step ring forward: q, k, v [B, S, H, D]; returns (out [B, S, H, D], lse [B, H, S])."""
    _refuse(dropout_p, causal)
    if tuple(window_size) != (-1, -1) or softcap or alibi_slopes is not None or return_softmax:
        raise ValueError("vcattn: sliding windows, softcap, ALiBi and returned softmax are not supported")
    return vcattn.attention(q, k, v, tensor_layout="NHD", sm_scale=softmax_scale, return_lse=True,
                            method=method, state=state, check_finite=False)


def yunchang_processor(method="vc"):
    """yunchang's `attn_processor`: each local attention of its USP layer
    (one per ring step, after the Ulysses all-to-all) as a vcattn call with
    `method`. Without a state each call groups its own key chunk along the
    values' principal direction (no k-means), as the drop-in call does."""
    return functools.partial(ring_forward, method=method)

