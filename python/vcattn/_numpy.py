"""numpy arrays through the CPU backend (float32 or float16; numpy has no bfloat16)."""
import ctypes

import numpy as np

from . import _capi, _core

_DTYPES = {np.dtype(np.float32): _capi.F32, np.dtype(np.float16): _capi.F16}


def _desc(a, layout):
    if a.dtype not in _DTYPES:
        raise ValueError("vcattn: numpy arrays must be float32 or float16, got %s" % a.dtype)
    if any(st % a.itemsize for st in a.strides):  # a view at byte offsets: element strides would misread it
        raise ValueError("vcattn: strides %s (bytes) are not multiples of the %d-byte items" % (a.strides, a.itemsize))
    if a.strides[-1] != a.itemsize:
        raise ValueError("vcattn: the head dim must be contiguous")
    b, x, y, d = a.shape
    sb, sx, sy = (s // a.itemsize for s in a.strides[:3])
    if layout == "HND":
        return (a.ctypes.data, _DTYPES[a.dtype], (b, x, y, d), (sb, sx, sy))
    return (a.ctypes.data, _DTYPES[a.dtype], (b, y, x, d), (sb, sy, sx))


def attention(q, k, v, tensor_layout, sm_scale, method, state, check_finite, switches, want_lse=True):
    """(out, lse); lse None unless want_lse (none is then formed)."""
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError("vcattn: q, k, v must share one dtype, got %s, %s, %s" % (q.dtype, k.dtype, v.dtype))
    out = np.empty(q.shape, dtype=q.dtype)
    b, hq, nq = (q.shape[0], q.shape[1], q.shape[2]) if tensor_layout == "HND" else (q.shape[0], q.shape[2], q.shape[1])
    lse = np.empty((b, hq, nq), dtype=np.float32) if want_lse else None
    cfg = _core.call_config(method, sm_scale, check_finite, switches)
    ctx = _core._context(_capi.BACKEND_CPU)
    _core.run(ctx, cfg, _desc(q, tensor_layout), _desc(k, tensor_layout), _desc(v, tensor_layout),
              _desc(out, tensor_layout), ctypes.c_void_p(lse.ctypes.data if lse is not None else None),
              state.c_layer() if state is not None else None)
    return out, lse
