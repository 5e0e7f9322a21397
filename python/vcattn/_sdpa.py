"""vcattn.sdpa: torch.nn.functional.scaled_dot_product_attention's signature
and semantics, running vcattn where it can and torch SDPA where it cannot.
Code that calls (or patches) F.scaled_dot_product_attention keeps working
unchanged: masks, causal calls, dropout, training (inputs that require
grad), 2-D tensors and batch dims to broadcast, head dims the GPU kernels
lack and devices other than CPU and CUDA all get torch SDPA's exact result;
3-D and 5-D (or more) calls run on vcattn like 4-D ones."""
import collections
from typing import Optional

import torch

from . import _core, _torch_op

# Calls per route ("vcattn", "sdpa:mask", ...); counted in eager calls only
# (the counter is Python state, which a traced path must not write).
routes = collections.Counter()

# torch's own SDPA, whatever F.scaled_dot_product_attention has been set to:
# a user who sets it to vcattn.sdpa must not send the fallbacks back here.
torch_sdpa = torch._C._nn.scaled_dot_product_attention


def _shape_4d(shape):
    """[..., H, L, E] as [B, H, L, E]: the batch dims flattened into one (one
    head for a 3-D shape)."""
    if len(shape) == 3:
        return (shape[0], 1, *shape[1:])
    return tuple(shape) if len(shape) == 4 else (-1, *shape[-3:])


def _as_4d(t):
    """t viewed (or, where the strides do not allow a view, copied) as _shape_4d says."""
    return t if t.dim() == 4 else t.reshape(_shape_4d(t.shape))


def _why_not(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
    """The reason a call goes to torch SDPA, or None (from metadata alone)."""
    if attn_mask is not None:
        return "mask"
    if is_causal:
        return "causal"
    if dropout_p:
        return "dropout"
    if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad):
        return "grad"
    if not (query.dim() == key.dim() == value.dim() >= 3) or \
            not (query.shape[:-3] == key.shape[:-3] == value.shape[:-3]):
        return "rank"  # SDPA's 2-D calls and broadcast batch dims
    if not (query.device == key.device == value.device) or query.device.type not in ("cpu", "cuda"):
        return "device"
    if not (query.dtype == key.dtype == value.dtype) or query.dtype not in _torch_op._DTYPES:
        return "dtype"
    # the shapes as 4-D, compared without reshaping (a reshape may copy)
    qs, ks, vs = (_shape_4d(t.shape) for t in (query, key, value))
    d = qs[-1]
    if ks[-1] != d or vs[-1] != d or ks[2] != vs[2] or ks[:2] != vs[:2] or qs[0] != ks[0]:
        return "shape"  # SDPA's own message, or its broadcasting
    if qs[1] != ks[1] and not (enable_gqa and qs[1] % ks[1] == 0):
        return "heads"  # SDPA raises without enable_gqa, as it should
    if query.numel() == 0 or key.numel() == 0:
        return "empty"
    if d % 8 or d > (max(_core._GPU_HEAD_DIMS) if query.is_cuda else 256):
        return "head_dim"
    if _core.too_short_for_gpu(query.device.type, ks[2]):
        return "short"  # faster on SDPA (vcattn.set_sdpa_below_keys)
    return None


def sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
         dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
         enable_gqa: bool = False, *, method: str = "vc") -> torch.Tensor:
    """torch.nn.functional.scaled_dot_product_attention([B, H, L, E] query,
    [B, Hkv, S, E] key and value, ...) computed by vcattn (method "vc" by
    default: the drop-in call) when the call is plain non-causal attention
    without a mask, dropout or grad, on CPU or CUDA in float32, float16 or
    bfloat16 with a head dim vcattn takes, and on CUDA at least
    vcattn.SDPA_BELOW_KEYS keys per head (vcattn.set_sdpa_below_keys);
    torch SDPA otherwise.
    vcattn.sdpa_routes counts the routes eager calls took."""
    why = _why_not(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    compiling = torch.compiler.is_compiling()
    if why is not None:
        if not compiling:
            routes["sdpa:" + why] += 1
        return torch_sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                          scale=scale, enable_gqa=enable_gqa)
    if not compiling:
        routes["vcattn"] += 1
    out, _ = _torch_op.attention(_as_4d(query), _as_4d(key), _as_4d(value), "HND", scale, method, None, False, {},
                                 want_lse=False)
    return out.reshape(*query.shape[:-1], out.shape[-1])
