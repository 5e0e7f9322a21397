"""vcattn.attention_varlen: packed sequences of different lengths, as
flash_attn_varlen_func and sageattn_varlen take them: q [total_q, Hq, D],
k and v [total_k, Hkv, D], cumulative offsets cu_seqlens_q and cu_seqlens_k
([batch + 1], starting at 0). Each sequence is its own call (its own
V-Smooth order), so no key of one sequence reaches another's queries. One
custom op: the offsets are read when it runs, so torch.compile traces it
without a graph break (offsets on the GPU cost one wait for them; offsets
kept on the CPU, as flash-attn callers often have them, cost none)."""
import torch

from . import _torch_op


def _check(q, k, v, cu_q, cu_k):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3:
            raise ValueError("vcattn: varlen %s must be [total_tokens, heads, head_dim], got shape %s"
                             % (name, tuple(t.shape)))
    if k.shape != v.shape or q.shape[2] != k.shape[2] or q.shape[1] % k.shape[1]:
        raise ValueError("vcattn: varlen shapes disagree: q %s, k %s, v %s (Hq a multiple of Hkv)"
                         % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    for name, t in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)):
        if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.dtype not in (torch.int32, torch.int64) or \
                t.shape[0] < 2:
            raise ValueError("vcattn: %s must be a 1-D int32 or int64 tensor of batch + 1 offsets" % name)
    if cu_q.shape[0] != cu_k.shape[0]:
        raise ValueError("vcattn: cu_seqlens_q and cu_seqlens_k give %d and %d sequences"
                         % (cu_q.shape[0] - 1, cu_k.shape[0] - 1))


def _bounds(cu, total, name):
    """The offsets as Python ints, checked: from 0, rising, ending at total."""
    offsets = [int(x) for x in cu.tolist()]
    if offsets[0] != 0 or offsets[-1] != total or any(b <= a for a, b in zip(offsets, offsets[1:])):
        raise ValueError("vcattn: %s must rise from 0 to %d with no empty sequence, got %s"
                         % (name, total, offsets if len(offsets) <= 16 else offsets[:16] + ["..."]))
    return offsets


@torch.library.custom_op("vcattn::attention_varlen", mutates_args=())
def _varlen_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: torch.Tensor, cu_k: torch.Tensor,
               scale: float, method: str, check_finite: bool) -> torch.Tensor:
    bq = _bounds(cu_q, q.shape[0], "cu_seqlens_q")
    bk = _bounds(cu_k, k.shape[0], "cu_seqlens_k")
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    for i in range(len(bq) - 1):
        qs, ks, vs = (t[None] for t in (q[bq[i]:bq[i + 1]], k[bk[i]:bk[i + 1]], v[bk[i]:bk[i + 1]]))
        o, _ = _torch_op.run(qs, ks, vs, "NHD", scale, method, {}, None, check_finite, want_lse=False)
        out[bq[i]:bq[i + 1]] = o[0]
    return out


@_varlen_op.register_fake
def _(q, k, v, cu_q, cu_k, scale, method, check_finite):
    return torch.empty_like(q, memory_format=torch.contiguous_format)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, sm_scale=None,
                     method="vc", check_finite=True):
    _check(q, k, v, cu_seqlens_q, cu_seqlens_k)
    q4, k4, v4, scale, d, _, _, _ = _torch_op.prepare(q[None], k[None], v[None], sm_scale, "NHD")
    out = torch.ops.vcattn.attention_varlen(q4[0], k4[0], v4[0], cu_seqlens_q, cu_seqlens_k, scale, method,
                                            bool(check_finite))
    return out[..., :d] if out.shape[-1] != d else out
