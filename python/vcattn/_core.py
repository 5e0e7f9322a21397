"""The drop-in call over the C API: torch tensors (CPU or CUDA) or numpy arrays."""
import ctypes
import math
import os
import sys
import threading
from typing import Any, Optional

from . import _capi

_LAYOUTS = ("HND", "NHD")
_GPU_HEAD_DIMS = (64, 128)

# The SDPA-compatible entry points (vcattn.sdpa, the diffusers backends,
# ComfyUI) send CUDA calls with fewer keys per head than this to torch SDPA:
# below it the quantizers cost more than the 8-bit kernel saves, and the call
# is slower than cuDNN's BF16 attention (docs/results.md). vcattn.attention
# always runs vcattn. VCATTN_SDPA_BELOW_KEYS sets it at import; 0: never.
SDPA_BELOW_KEYS = 10240


def _below_keys_from_env():
    text = os.environ.get("VCATTN_SDPA_BELOW_KEYS", "")
    if not text:
        return SDPA_BELOW_KEYS
    try:
        keys = int(text)
    except ValueError:
        keys = -1
    if keys < 0:
        raise ValueError("vcattn: VCATTN_SDPA_BELOW_KEYS must be a non-negative integer (keys per head), got %r"
                         % text)
    return keys


sdpa_below_keys = _below_keys_from_env()


def set_sdpa_below_keys(keys: int) -> int:
    """Sets the length rule of the SDPA-compatible entry points: CUDA calls
    with fewer keys per head than `keys` run on torch SDPA (0: none do).
    Returns the previous value."""
    global sdpa_below_keys
    if isinstance(keys, bool) or not isinstance(keys, int) or keys < 0:
        raise ValueError("vcattn: set_sdpa_below_keys takes a non-negative int (keys per head), got %r" % (keys,))
    previous, sdpa_below_keys = sdpa_below_keys, keys
    return previous


def too_short_for_gpu(device_type: str, keys: int) -> bool:
    """Whether the length rule sends a call with `keys` keys per head on
    `device_type` to torch SDPA."""
    return device_type == "cuda" and keys < sdpa_below_keys


_lib = None
_local = threading.local()


class VcattnError(RuntimeError):
    """A vcattn call failed; the message is the library's."""


class OutOfMemoryError(VcattnError, MemoryError):
    """The library could not get device (or host) memory; nothing was written
    and the call can be retried once memory is freed."""


def lib():
    global _lib
    if _lib is None:
        _lib = _capi.load()
    return _lib


def _context(backend):
    """One context per thread and backend (a context keeps its last error)."""
    cache = getattr(_local, "contexts", None)
    if cache is None:
        cache = _local.contexts = {}
    if backend not in cache:
        ctx = ctypes.c_void_p()
        st = lib().vcattn_create(ctypes.byref(ctx), backend)
        if st:
            why = ctypes.c_char_p()
            lib().vcattn_backend_available(backend, ctypes.byref(why))
            raise VcattnError("vcattn: cannot use the %s backend: %s" % (
                "cuda" if backend == _capi.BACKEND_CUDA else "cpu", (why.value or b"").decode()))
        cache[backend] = ctx
    return cache[backend]


_FIELDS = {name: ctype for name, ctype in _capi.Config._fields_}
_FLOAT_FIELDS = {name for name, ctype in _capi.Config._fields_ if ctype is ctypes.c_float}
# SDPA / sageattn keywords a drop-in caller may pass: harmless values are
# dropped (attn_mask=None, dropout_p=0, any enable_gqa: grouped-query heads
# are always accepted); others are refused with the reason.
_UNSUPPORTED = {
    "attn_mask": "attention masks are not supported (full non-causal attention only; vcattn.sdpa routes "
                 "masked calls to torch SDPA)",
    "dropout_p": "dropout is not supported (inference only)",
}
_HARMLESS = {"attn_mask": lambda x: x is None, "dropout_p": lambda x: x == 0, "enable_gqa": lambda x: True}


def _fits(key, value):
    """value as the C field key holds it, or a ValueError where the C type
    would change it (an integer out of its range, a nonzero float that
    float32 rounds to 0 or to infinity): ctypes narrows silently."""
    ctype = _FIELDS[key]
    if ctype is ctypes.c_float:
        narrowed = ctypes.c_float(value).value
        if (value != 0 and narrowed == 0) or (math.isfinite(value) and not math.isfinite(narrowed)):
            raise ValueError("vcattn: config field %s=%r is outside float32's range (it would become %r)"
                             % (key, value, narrowed))
        return float(value)
    bits = ctypes.sizeof(ctype) * 8
    lo, hi = (0, 2 ** bits - 1) if ctype is ctypes.c_uint64 else (-2 ** (bits - 1), 2 ** (bits - 1) - 1)
    if not lo <= value <= hi:
        raise ValueError("vcattn: config field %s=%d is outside its C type's range [%d, %d]" % (key, value, lo, hi))
    return int(value)


def check_switches(switches):
    """Config field overrides as {name: int or float}, or a TypeError naming the bad one."""
    out = {}
    for key, value in switches.items():
        if key in _HARMLESS and _HARMLESS[key](value):
            continue
        if key in _UNSUPPORTED:
            raise TypeError("vcattn: %s: %s" % (key, _UNSUPPORTED[key]))
        if key not in _FIELDS:
            raise TypeError("vcattn: unknown keyword or config field %r (config fields: %s)"
                            % (key, ", ".join(_FIELDS)))
        is_float = key in _FLOAT_FIELDS
        if not isinstance(value, (int, float)) or not (is_float or float(value).is_integer()):
            raise TypeError("vcattn: config field %s takes %s, got %r"
                            % (key, "a number" if is_float else "an integer", value))
        out[key] = _fits(key, float(value) if is_float else int(value))
    return out


def encode_switches(switches):
    """The overrides as one string (the torch op's arguments are plain types)."""
    return ";".join("%s=%r" % (k, switches[k]) for k in sorted(switches))


def decode_switches(text):
    out = {}
    for item in filter(None, text.split(";")):
        key, value = item.split("=", 1)
        out[key] = float(value) if key in _FLOAT_FIELDS else int(value)
    return out


def config_fields(cfg):
    """Every field of a Config as {name: value}."""
    return {name: getattr(cfg, name) for name in _FIELDS}


def config(method: str = "vc", sm_scale: Optional[float] = None, check_finite: bool = True,
           **switches: Any) -> _capi.Config:
    """The C config of a method preset, with sm_scale and any field overridden."""
    cfg = _capi.Config()
    if lib().vcattn_config_from_method(method.encode(), ctypes.byref(cfg)):
        raise ValueError("vcattn: unknown method %r (sage2, vsmooth, vc, bf16, fp8-naive, sage3-4bit, "
                         "vsmooth-4bit; each may take +hadamard, then +qsmooth; the V-Smooth methods then +probe)" % (method,))
    if sm_scale is not None:
        if not (sm_scale > 0 and math.isfinite(sm_scale)):
            raise ValueError("vcattn: sm_scale must be a positive finite number, got %r" % (sm_scale,))
        cfg.sm_scale = float(sm_scale)
        if cfg.sm_scale == 0:  # 0 would mean the default 1/sqrt(D)
            raise ValueError("vcattn: sm_scale=%r is below float32's smallest positive value" % (sm_scale,))
    cfg.check_finite = int(bool(check_finite))
    for key, value in check_switches(switches).items():
        setattr(cfg, key, value)
    return cfg


_call_configs = {}  # (method, sm_scale, check_finite, switches) -> Config, read-only: the calls' own


def call_config(method, sm_scale, check_finite, switches):
    """config(...) for a call, made once per distinct arguments: the C call
    only reads it, and building it costs a C call and a field check each
    time. switches: {field: value}."""
    key = (method, sm_scale, bool(check_finite), tuple(sorted(switches.items())))
    try:
        cfg = _call_configs.get(key)
    except TypeError:  # an unhashable value: config() names what is wrong with it
        return config(method, sm_scale, check_finite, **switches)
    if cfg is None:
        cfg = config(method, sm_scale, check_finite, **switches)
        if len(_call_configs) >= 256:  # many distinct scales or switches: start over
            _call_configs.clear()
        _call_configs[key] = cfg
    return cfg


def check_step(step, num_inference_steps):
    """step as an int inside [0, num_inference_steps), or a ValueError naming both."""
    step = int(step)
    if not 0 <= step < num_inference_steps:
        raise ValueError("vcattn: step %d is outside [0, %d) (num_inference_steps)" % (step, num_inference_steps))
    return step


class _CLayer:
    """The C side of a LayerState: its vcattn_layer, made when a call first
    needs it (at run time, never while torch.compile traces)."""

    def __init__(self, num_inference_steps):
        self.handle = ctypes.c_void_p()
        if lib().vcattn_layer_create(ctypes.byref(self.handle), num_inference_steps):
            raise VcattnError("vcattn: could not create a layer state")

    def __del__(self):
        if getattr(self, "handle", None) and _lib is not None:
            _lib.vcattn_layer_destroy(self.handle)


# The C layers of the live LayerStates, by id. Only run time code (a call, a
# plan) adds to it, so creating a LayerState is plain Python that
# torch.compile can trace: its side effects land only after the traced graph
# has run, and the graph's call must already find its layer.
_c_layers = {}
_state_count = [0]


def layer_of(state_id, num_inference_steps, step):
    """The C layer of LayerState `state_id` (None for 0), made on first use,
    at `step`."""
    if not state_id:
        return None
    c = _c_layers.get(state_id)
    if c is None:
        c = _c_layers[state_id] = _CLayer(num_inference_steps)
    if lib().vcattn_layer_set_step(c.handle, step):
        raise ValueError("vcattn: step %d is outside [0, %d) (num_inference_steps)" % (step, num_inference_steps))
    return c.handle


def _id_token(state_id, num_inference_steps):
    """(id, num_inference_steps, step) as a CPU int64 tensor when torch is
    loaded (None else; the torch op's front makes it then). Made with the
    state, before any tracing, so a compiled graph takes it as an input, not
    as a constant: one graph serves every layer, and a new step only writes
    into it."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return torch.tensor([state_id, num_inference_steps, 0], dtype=torch.int64)


class LayerState:
    """Per-layer V-Smooth state (centroids, permutation, step): one per attention
    module, kept across the denoising steps (paper appendix A). Creating one
    is plain Python (its C state is made by the first call that uses it), so
    Schedule.layer may run inside torch.compile(fullgraph=True)."""

    def __init__(self, num_inference_steps):
        if int(num_inference_steps) < 1:
            raise ValueError("vcattn: num_inference_steps must be >= 1, got %r" % (num_inference_steps,))
        self.num_inference_steps = int(num_inference_steps)
        self._step = 0
        _state_count[0] += 1
        self.id = _state_count[0]
        self._token = _id_token(self.id, self.num_inference_steps)

    @property
    def step(self):
        return self._step

    @step.setter
    def step(self, value):
        self._step = check_step(value, self.num_inference_steps)
        if self._token is not None:
            self._token[2] = self._step

    def c_layer(self):
        """The C vcattn_layer (a c_void_p), made on first use, at this state's step."""
        return layer_of(self.id, self.num_inference_steps, self._step)

    def plan(self, method="vc"):
        """What a call would do now: 'none', 'cold', 'warm', 'reuse'."""
        cfg = config(method)
        return ("none", "cold", "warm", "reuse", "principal")[lib().vcattn_layer_plan(self.c_layer(), ctypes.byref(cfg))]

    def reset(self):
        if self.id in _c_layers:
            lib().vcattn_layer_reset(_c_layers[self.id].handle)

    def __del__(self):
        _c_layers.pop(getattr(self, "id", None), None)


def _kind(t):
    """"torch" or "numpy" for a tensor or an array, else None."""
    module = type(t).__module__
    if module.startswith("torch") and hasattr(t, "data_ptr"):
        return "torch"
    if module.startswith("numpy") and hasattr(t, "ctypes"):
        return "numpy"
    return None


def _check_layout(q, k, v, tensor_layout):
    if tensor_layout not in _LAYOUTS:
        raise ValueError("vcattn: tensor_layout must be 'HND' ([B, H, N, D]) or 'NHD' ([B, N, H, D]), "
                         "got %r" % (tensor_layout,))
    kinds = [_kind(t) for t in (q, k, v)]
    for name, t, kind in zip("qkv", (q, k, v), kinds):
        if kind is None:
            raise TypeError("vcattn: %s must be a torch tensor or a numpy array, got %s" % (name, type(t).__name__))
    if len(set(kinds)) > 1:
        raise TypeError("vcattn: q, k, v must all be torch tensors or all numpy arrays, got %s"
                        % ", ".join(kinds))
    for name, t in (("q", q), ("k", k), ("v", v)):
        if len(t.shape) != 4:
            raise ValueError("vcattn: %s must be 4-D (%s), got shape %s" % (name, tensor_layout, tuple(t.shape)))
        if 0 in tuple(t.shape):
            raise ValueError("vcattn: %s is empty (shape %s): every size must be positive" % (name, tuple(t.shape)))
    def bhnd(t):
        b, x, y, d = t.shape
        return (b, x, y, d) if tensor_layout == "HND" else (b, y, x, d)
    (bq, hq, nq, dq), (bk, hk, nk, dk), (bv, hv, nv, dv) = bhnd(q), bhnd(k), bhnd(v)
    if not (bq == bk == bv and dq == dk == dv and hk == hv and nk == nv):
        raise ValueError("vcattn: shapes disagree: q %s, k %s, v %s (%s)" % (
            tuple(q.shape), tuple(k.shape), tuple(v.shape), tensor_layout))
    if hq % hk:
        raise ValueError("vcattn: query heads (%d) must be a multiple of key/value heads (%d)" % (hq, hk))
    return bq, hq, hk, nq, nk, dq


def _view(data_ptr, dtype_code, shape_bhnd, strides_bhnd):
    b, h, n, d = shape_bhnd
    sb, sh, sn = strides_bhnd
    return _capi.Tensor(data_ptr, dtype_code, b, h, n, d, sb, sh, sn)


def _raise(ctx, st):
    msg = lib().vcattn_last_error(ctx).decode() or lib().vcattn_status_string(st).decode()
    S = _capi.Status
    if st in (S.NULL_POINTER, S.INVALID_ARGUMENT, S.SHAPE_MISMATCH, S.UNSUPPORTED_DTYPE,
              S.UNSUPPORTED_HEAD_DIM, S.UNSUPPORTED_CONFIG, S.NONFINITE_INPUT):
        raise ValueError("vcattn: " + msg)
    if st == S.OUT_OF_MEMORY:
        raise OutOfMemoryError("vcattn: " + msg)
    raise VcattnError("vcattn: " + msg)


def run(ctx, cfg, q, k, v, out, lse_ptr, layer, rope=None):
    """q, k, v, out: (data_ptr, dtype_code, shape_bhnd, strides_bhnd) tuples;
    rope: a _capi.Rope or None."""
    tq, tk, tv, to = (_view(*x) for x in (q, k, v, out))
    st = lib().vcattn_attention(ctx, ctypes.byref(cfg), ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv),
                                ctypes.byref(to), lse_ptr, ctypes.byref(rope) if rope is not None else None, layer)
    if st:
        _raise(ctx, st)
