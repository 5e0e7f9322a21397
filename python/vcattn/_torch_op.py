"""The torch custom op behind vcattn.attention for torch tensors: registered
with torch.library.custom_op and a fake implementation, so torch.compile
traces it as one opaque node; runs on the current stream of q's device.
Eager calls on plain tensors run the op's body directly (the same code,
less host time); traced, fake or wrapped tensors go through the op."""
import ctypes
from typing import Optional

import torch

from . import _capi, _core

_DTYPES = {torch.float32: _capi.F32, torch.float16: _capi.F16, torch.bfloat16: _capi.BF16}
ROPE_STYLES = {"interleaved": 0, "half": 1}  # vcattn_rope_style


def _desc(t, layout):
    """(data_ptr, dtype code, [B, H, N, D], strides of B, H, N) of a 4-D tensor."""
    b, x, y, d = t.shape
    sb, sx, sy, _ = t.stride()
    if layout == "HND":
        return (t.data_ptr(), _DTYPES[t.dtype], (b, x, y, d), (sb, sx, sy))
    return (t.data_ptr(), _DTYPES[t.dtype], (b, y, x, d), (sb, sy, sx))


def run(q, k, v, layout, sm_scale, method, switches, layer, check_finite, rope=None, want_lse=True):
    """The op's body, at run time (never traced): the C call on q's device and
    current stream. switches: {field: value}; layer: a C layer handle or None;
    rope: (q_cos, q_sin, k_cos, k_sin, style code) with float32 tables
    [N, D/2] or [B or 1, H or 1, N, D/2] on q's device, or None. Returns (out, lse), lse
    None unless want_lse (the library then forms no LSE: a call saves the
    per-row LSE shifts of Q's pass)."""
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    b, hq, nq = (q.shape[0], q.shape[1], q.shape[2]) if layout == "HND" else (q.shape[0], q.shape[2], q.shape[1])
    lse = torch.empty((b, hq, nq), dtype=torch.float32, device=q.device) if want_lse else None
    lse_ptr = ctypes.c_void_p(lse.data_ptr() if lse is not None else None)
    cfg = _core.call_config(method, sm_scale if sm_scale > 0 else None, check_finite, switches)
    tables = None
    if rope is not None:
        q_cos, q_sin, k_cos, k_sin, style = rope
        q_cos, q_sin = _same_rows(q_cos, q_sin)
        k_cos, k_sin = _same_rows(k_cos, k_sin)
        tables = _capi.Rope(style, q_cos.data_ptr(), q_sin.data_ptr(), k_cos.data_ptr(), k_sin.data_ptr(),
                            *_table_strides(q_cos), *_table_strides(k_cos))
    views = (_desc(q, layout), _desc(k, layout), _desc(v, layout), _desc(out, layout))
    if q.is_cuda:
        ctx = _core._context(_capi.BACKEND_CUDA)
        with torch.cuda.device(q.device):
            _core.lib().vcattn_set_cuda_stream(ctx, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
            _core.run(ctx, cfg, *views, lse_ptr, layer, tables)
    else:
        _core.run(_core._context(_capi.BACKEND_CPU), cfg, *views, lse_ptr, layer, tables)
    return out, lse


def _same_rows(cos, sin):
    """cos and sin with unit element strides and one layout (the C struct has one set of strides for both)."""
    if cos.stride(-1) != 1 or sin.stride(-1) != 1 or cos.stride() != sin.stride():
        return cos.contiguous(), sin.contiguous()
    return cos, sin


def _table_strides(t):
    """(batch, head, token) strides of a [N, D/2] or [B, H, N, D/2] table; a size-1 axis is shared (stride 0)."""
    if t.dim() == 2:
        return 0, 0, t.stride(0)
    return tuple(s if n > 1 else 0 for n, s in zip(t.shape[:3], t.stride()[:3]))


def no_lse(q):
    """The lse an op returns when none was asked for: empty (an op's outputs are tensors)."""
    return q.new_empty((0,), dtype=torch.float32)


def op_outputs(q, out, lse):
    """An op's (out, lse) from run's: lse empty where none was asked for."""
    return out, lse if lse is not None else no_lse(q)


def fake_outputs(q, layout, want_lse=True):
    """The (out, lse) a call returns, as empty tensors of the right shapes (fake implementations)."""
    b, hq, nq = (q.shape[0], q.shape[1], q.shape[2]) if layout == "HND" else (q.shape[0], q.shape[2], q.shape[1])
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            q.new_empty((b, hq, nq), dtype=torch.float32) if want_lse else no_lse(q))


@torch.library.custom_op("vcattn::attention", mutates_args=())
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str, sm_scale: float,
                 method: str, switches: str, layer: Optional[torch.Tensor], check_finite: bool,
                 rope_cos: Optional[torch.Tensor], rope_sin: Optional[torch.Tensor],
                 rope_style: int, want_lse: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    handle = _core.layer_of(*(int(x) for x in layer.tolist())) if layer is not None else None
    rope = (rope_cos, rope_sin, rope_cos, rope_sin, rope_style) if rope_cos is not None else None
    return op_outputs(q, *run(q, k, v, layout, sm_scale, method, _core.decode_switches(switches), handle,
                              check_finite, rope, want_lse))


@attention_op.register_fake
def _(q, k, v, layout, sm_scale, method, switches, layer, check_finite, rope_cos, rope_sin, rope_style,
      want_lse=True):
    return fake_outputs(q, layout, want_lse)


def _layer_token(state):
    """The state's (id, num_inference_steps, step) tensor, the op's input (None without a state)."""
    if state is None:  # no tensor at all: a graph without a CPU input stays fit for CUDA graphs
        return None
    if state._token is None:  # made before torch was loaded
        state._token = torch.tensor([state.id, state.num_inference_steps, state.step], dtype=torch.int64)
    return state._token


def prepare(q, k, v, sm_scale, layout="HND", rope=None, rope_style="interleaved"):
    """Checks what a call's tensors must satisfy (from their metadata alone,
    so it traces without a guard on values) and zero-pads a head dim the GPU
    lacks. Returns (q, k, v, scale, d, cos, sin, style): d the caller's head
    dim, to cut the output back to; cos, sin the RoPE tables as float32
    [N, D/2] (padded with the identity rotation), or None."""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise RuntimeError("vcattn: inference only (there is no backward): q, k or v requires grad; call it "
                           "under torch.no_grad() or torch.inference_mode(), or pass detached tensors")
    if not (q.device == k.device == v.device):
        raise ValueError("vcattn: q, k, v are on different devices (%s, %s, %s)" % (q.device, k.device, v.device))
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in _DTYPES:
        raise ValueError("vcattn: q, k, v must share one dtype among float16, bfloat16, float32; got %s, %s, %s"
                         % (q.dtype, k.dtype, v.dtype))
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError("vcattn: tensors on %s are not supported (cpu or cuda)" % (q.device,))
    if rope_style not in ROPE_STYLES:
        raise ValueError("vcattn: rope_style must be one of %s, got %r" % (", ".join(ROPE_STYLES), rope_style))
    d = q.shape[-1]
    scale = float(sm_scale if sm_scale is not None else d ** -0.5)
    cos = sin = None
    if rope is not None:
        seq, head = (2, 1) if layout == "HND" else (1, 2)
        cos, sin = _rope_tables(rope, q.shape[0], q.shape[head], k.shape[head], q.shape[seq], k.shape[seq], d,
                                q.device)
    if q.is_cuda and d not in _core._GPU_HEAD_DIMS:
        if d > max(_core._GPU_HEAD_DIMS) or d % 8:
            raise ValueError("vcattn: head dim %d unsupported on the GPU (64 and 128; smaller multiples of 8 "
                             "are zero-padded)" % d)
        pad = min(x for x in _core._GPU_HEAD_DIMS if x > d) - d
        if cos is not None and rope_style == "half":
            # the pairs (i, i + D/2) move with D: each half of q and k padded on its own, so channel i
            # still pairs with channel i + D/2 of the padded row
            q, k = (torch.cat([torch.nn.functional.pad(x, (0, pad // 2)) for x in t.chunk(2, dim=-1)], -1)
                    for t in (q, k))
            v = torch.nn.functional.pad(v, (0, pad))
        else:
            q, k, v = (torch.nn.functional.pad(t, (0, pad)) for t in (q, k, v))
        if cos is not None:
            cos = torch.nn.functional.pad(cos, (0, pad // 2), value=1.0)  # the zero columns stay zero
            sin = torch.nn.functional.pad(sin, (0, pad // 2))
    return q, k, v, scale, d, cos, sin, ROPE_STYLES[rope_style]


def _rope_tables(rope, batch, hq, hk, nq, nk, d, device):
    """(cos, sin) as float32 [N, D/2] or [B or 1, H or 1, N, D/2] tables, checked."""
    if not (isinstance(rope, (tuple, list)) and len(rope) == 2):
        raise TypeError("vcattn: rope must be a (cos, sin) pair of [tokens, head_dim/2] or "
                        "[batch, heads, tokens, head_dim/2] tensors")
    if nq != nk:
        raise ValueError("vcattn: q and k share the rope tables, so they need as many tokens (got %d and %d)"
                         % (nq, nk))
    if d % 2:
        raise ValueError("vcattn: rope needs an even head dim, got %d" % d)
    tables = []
    for name, t in zip(("cos", "sin"), rope):
        if not isinstance(t, torch.Tensor):
            raise TypeError("vcattn: rope %s must be a torch tensor, got %s" % (name, type(t).__name__))
        if t.device != device:
            raise ValueError("vcattn: rope %s is on %s, q on %s" % (name, t.device, device))
        shape = tuple(t.shape)
        if not (shape == (nk, d // 2) or (len(shape) == 4 and shape[0] in (1, batch) and shape[1] in (1, hq)
                                           and shape[2:] == (nk, d // 2))):
            raise ValueError("vcattn: rope %s must be [tokens, head_dim/2] = [%d, %d] or [batch or 1, heads or 1, "
                             "tokens, head_dim/2] = [%d, %d, %d, %d], got %s"
                             % (name, nk, d // 2, batch, hq, nk, d // 2, shape))
        if len(shape) == 4 and shape[1] > 1 and hq != hk:
            raise ValueError("vcattn: per-head rope tables need as many key heads as query heads (got %d and %d)"
                             % (hq, hk))
        if not t.is_floating_point():
            raise ValueError("vcattn: rope %s must be a float tensor, got %s" % (name, t.dtype))
        tables.append(t.to(torch.float32))
    if tables[0].shape != tables[1].shape:
        raise ValueError("vcattn: rope cos and sin must have the same shape, got %s and %s"
                         % (tuple(tables[0].shape), tuple(tables[1].shape)))
    return tables


def _eager(t):
    """Whether a call on t runs now on a plain tensor: not traced by the
    compiler, not a fake or wrapped tensor (those go through the op)."""
    return type(t) is torch.Tensor and not torch.compiler.is_compiling()


def attention(q, k, v, tensor_layout, sm_scale, method, state, check_finite, switches, rope=None,
              rope_style="interleaved", want_lse=True):
    """(out, lse); lse None unless want_lse."""
    q, k, v, scale, d, cos, sin, style = prepare(q, k, v, sm_scale, tensor_layout, rope, rope_style)
    if _eager(q) and _eager(k) and _eager(v):
        # the op's body without the dispatcher's bookkeeping: the same call, about a quarter less host time
        handle = state.c_layer() if state is not None else None
        out, lse = run(q, k, v, tensor_layout, scale, method, switches, handle, bool(check_finite),
                       (cos, sin, cos, sin, style) if cos is not None else None, want_lse)
    else:
        out, lse = torch.ops.vcattn.attention(q, k, v, tensor_layout, scale, method,
                                              _core.encode_switches(switches), _layer_token(state),
                                              bool(check_finite), cos, sin, style, want_lse)
        lse = lse if want_lse else None
    return (out[..., :d] if out.shape[-1] != d else out), lse
