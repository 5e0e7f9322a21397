"""The torch custom op behind vcattn.attention for torch tensors: registered
with torch.library.custom_op and a fake implementation, so torch.compile
traces it as one opaque node; runs on the current stream of q's device."""
import ctypes

import torch

from . import _capi, _core

_DTYPES = {torch.float32: _capi.F32, torch.float16: _capi.F16, torch.bfloat16: _capi.BF16}


def _desc(t, layout):
    """(data_ptr, dtype code, [B, H, N, D], strides of B, H, N) of a 4-D tensor."""
    b, x, y, d = t.shape
    sb, sx, sy, _ = t.stride()
    if layout == "HND":
        return (t.data_ptr(), _DTYPES[t.dtype], (b, x, y, d), (sb, sx, sy))
    return (t.data_ptr(), _DTYPES[t.dtype], (b, y, x, d), (sb, sy, sx))


@torch.library.custom_op("vcattn::attention", mutates_args=())
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str, sm_scale: float,
                 method: str, switches: str, layer: torch.Tensor, check_finite: bool) -> tuple[torch.Tensor, torch.Tensor]:
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    b, hq, nq = (q.shape[0], q.shape[1], q.shape[2]) if layout == "HND" else (q.shape[0], q.shape[2], q.shape[1])
    lse = torch.empty((b, hq, nq), dtype=torch.float32, device=q.device)
    cfg = _core.config(method, sm_scale if sm_scale > 0 else None, check_finite,
                       **_core.decode_switches(switches))
    layer = _core.layer_of(*(int(x) for x in layer.tolist()))
    if q.is_cuda:
        ctx = _core._context(_capi.BACKEND_CUDA)
        with torch.cuda.device(q.device):
            _core.lib().vcattn_set_cuda_stream(ctx, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
            _core.run(ctx, cfg, _desc(q, layout), _desc(k, layout), _desc(v, layout), _desc(out, layout),
                      ctypes.c_void_p(lse.data_ptr()), layer)
    else:
        ctx = _core._context(_capi.BACKEND_CPU)
        _core.run(ctx, cfg, _desc(q, layout), _desc(k, layout), _desc(v, layout), _desc(out, layout),
                  ctypes.c_void_p(lse.data_ptr()), layer)
    return out, lse


@attention_op.register_fake
def _(q, k, v, layout, sm_scale, method, switches, layer, check_finite):
    b, hq, nq = (q.shape[0], q.shape[1], q.shape[2]) if layout == "HND" else (q.shape[0], q.shape[2], q.shape[1])
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            q.new_empty((b, hq, nq), dtype=torch.float32))


def _layer_token(state):
    """The state's (id, num_inference_steps, step) tensor, the op's input."""
    if state is None:
        return torch.zeros(3, dtype=torch.int64)
    if state._token is None:  # made before torch was loaded
        state._token = torch.tensor([state.id, state.num_inference_steps, state.step], dtype=torch.int64)
    return state._token


def attention(q, k, v, tensor_layout, sm_scale, method, state, check_finite, switches):
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
    d = q.shape[-1]
    scale = sm_scale if sm_scale is not None else d ** -0.5
    pad = 0
    if q.is_cuda and d not in _core._GPU_HEAD_DIMS:
        if d > max(_core._GPU_HEAD_DIMS) or d % 8:
            raise ValueError("vcattn: head dim %d unsupported on the GPU (64 and 128; smaller multiples of 8 "
                             "are zero-padded)" % d)
        pad = min(x for x in _core._GPU_HEAD_DIMS if x > d) - d
        q, k, v = (torch.nn.functional.pad(t, (0, pad)) for t in (q, k, v))
    out, lse = torch.ops.vcattn.attention(q, k, v, tensor_layout, float(scale), method,
                                          _core.encode_switches(switches),
                                          _layer_token(state), bool(check_finite))
    if pad:
        out = out[..., :d]
    return out, lse
