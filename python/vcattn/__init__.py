"""vcattn: VC-Attention (V-Smooth + ExpCast-FP8 on INT8-QK / FP8-PV attention)
for video diffusion transformers.

    import vcattn
    out = vcattn.attention(q, k, v, tensor_layout="HND")            # sageattn-style call
    schedule = vcattn.Schedule(num_inference_steps=40)                  # grouping schedule
    out = vcattn.attention(q, k, v, state=schedule.layer("block0"))

Torch tensors (CPU or CUDA) and numpy arrays (CPU backend) are accepted.
"""
from __future__ import annotations

from typing import Any, Literal, Mapping, Optional, Tuple, TypeVar, Union, overload

from . import _capi
from ._core import LayerState, OutOfMemoryError, VcattnError, _check_layout, check_step, config, lib  # noqa: F401 (config: public)
from ._core import check_switches, config_fields
from ._core import SDPA_BELOW_KEYS, set_sdpa_below_keys  # noqa: F401 (public)

__all__ = ["attention", "attention_varlen", "sdpa", "Schedule", "LayerState", "VcattnError", "OutOfMemoryError", "config", "version",
           "SDPA_BELOW_KEYS", "set_sdpa_below_keys"]


def sdpa(query: ArrayT, key: ArrayT, value: ArrayT, attn_mask: Optional[Any] = None, dropout_p: float = 0.0,
         is_causal: bool = False, scale: Optional[float] = None, enable_gqa: bool = False, *,
         method: str = "vc") -> ArrayT:
    """torch.nn.functional.scaled_dot_product_attention's signature and
    semantics: vcattn where it can run the call, torch SDPA where it cannot
    (masks, causal, dropout, grad, 2-D or broadcast batch dims, dtypes,
    devices or head dims) or where SDPA is faster (CUDA calls under
    vcattn.SDPA_BELOW_KEYS keys per head: vcattn.set_sdpa_below_keys);
    vcattn.sdpa_routes counts which ran (eager calls)."""
    from ._sdpa import sdpa as impl
    return impl(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, method=method)


def attention_varlen(q: ArrayT, k: ArrayT, v: ArrayT, cu_seqlens_q: Any, cu_seqlens_k: Any,
                     max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None,
                     sm_scale: Optional[float] = None, method: str = "vc", check_finite: bool = True) -> ArrayT:
    """Packed sequences of different lengths (flash_attn_varlen_func's
    layout): q [total_q, Hq, D], k and v [total_k, Hkv, D], cu_seqlens_q and
    cu_seqlens_k the int32/int64 offsets [batch + 1] from 0; each sequence
    attends only to its own keys, grouped on its own. Torch tensors only;
    max_seqlen_* are accepted for flash-attn compatibility and not needed."""
    from ._varlen import attention_varlen as impl
    return impl(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, sm_scale, method, check_finite)


def __getattr__(name: str) -> Any:
    if name == "sdpa_routes":  # without importing torch for numpy users
        from ._sdpa import routes
        return routes
    raise AttributeError("module 'vcattn' has no attribute %r" % name)


def version() -> str:
    return lib().vcattn_version_string().decode()


ArrayT = TypeVar("ArrayT")  # torch.Tensor or numpy.ndarray: the results have q's type
Layout = Literal["HND", "NHD"]
RopeStyle = Literal["interleaved", "half"]
Config = Union[_capi.Config, Mapping[str, Any], None]


@overload
def attention(q: ArrayT, k: ArrayT, v: ArrayT, tensor_layout: Layout = ..., is_causal: bool = ...,
              sm_scale: Optional[float] = ..., return_lse: Literal[False] = ..., method: str = ...,
              state: Optional[LayerState] = ..., check_finite: Optional[bool] = ..., *, scale: Optional[float] = ...,
              config: Config = ..., rope: Optional[Tuple[Any, Any]] = ..., rope_style: RopeStyle = ...,
              **switches: Any) -> ArrayT: ...


@overload
def attention(q: ArrayT, k: ArrayT, v: ArrayT, tensor_layout: Layout, is_causal: bool, sm_scale: Optional[float],
              return_lse: Literal[True], method: str = ..., state: Optional[LayerState] = ...,
              check_finite: Optional[bool] = ..., *, scale: Optional[float] = ..., config: Config = ...,
              rope: Optional[Tuple[Any, Any]] = ..., rope_style: RopeStyle = ...,
              **switches: Any) -> Tuple[ArrayT, ArrayT]: ...


@overload
def attention(q: ArrayT, k: ArrayT, v: ArrayT, tensor_layout: Layout = ..., is_causal: bool = ...,
              sm_scale: Optional[float] = ..., *, return_lse: Literal[True], method: str = ...,
              state: Optional[LayerState] = ..., check_finite: Optional[bool] = ..., scale: Optional[float] = ...,
              config: Config = ..., rope: Optional[Tuple[Any, Any]] = ..., rope_style: RopeStyle = ...,
              **switches: Any) -> Tuple[ArrayT, ArrayT]: ...


def attention(q: Any, k: Any, v: Any, tensor_layout: Layout = "HND", is_causal: bool = False,
              sm_scale: Optional[float] = None, return_lse: bool = False, method: str = "vc",
              state: Optional[LayerState] = None, check_finite: Optional[bool] = None, *,
              scale: Optional[float] = None, config: Config = None, rope: Optional[Tuple[Any, Any]] = None,
              rope_style: RopeStyle = "interleaved", **switches: Any) -> Any:
    """Non-causal attention of q [B, Hq, Nq, D] (or [B, Nq, Hq, D] with
    tensor_layout="NHD") against k, v [B, Hkv, Nk, D]; Hq a multiple of Hkv.
    Inference only: inputs that require grad (with grad mode on) are refused.

    method: "vc" (default), "vsmooth", "sage2" (each "+hadamard"); the CPU
    backend also runs "bf16", "fp8-naive", "sage3-4bit", "vsmooth-4bit", and
    any method with a "+qsmooth" suffix (Q smoothing: slightly more faithful,
    16-17% slower attention kernel for vc on the H200); the V-Smooth methods
    then take "+probe" (V-Smooth's centres weighted by the attention of 64
    query rows instead of vc's default 32; "vsmooth-4bit" has it already).
    sm_scale (or its alias scale, as in torch SDPA): softmax scale, default
    1/sqrt(D). state: a LayerState (or Schedule.layer(...)) carrying the
    V-Smooth grouping across denoising steps; None (the drop-in call, within
    a few percent of a plain step) sorts the keys along the values' principal
    direction and demeans its 128-key blocks, without k-means.
    return_lse: also return the log-sum-exp per row, natural log, float32
    [B, Hq, Nq] (as sageattn). check_finite: reject NaN/Inf inputs, and
    inputs whose scores float32 cannot resolve; default on. On the GPU the
    host then waits for the call's preprocessing kernels (not for its
    attention kernel, queued behind them).
    rope: (cos, sin), float tensors [N, D/2] on q's device (torch tensors
    only): q and k come before their rotary embedding, which the quantizers
    apply in float32 (no rounded copy of the rotated q and k); one table for
    both, so Nq == Nk. Tables [B or 1, H or 1, N, D/2] (any strides) give
    each batch entry or head its own rows (LTX-Video's differ per head). rope_style: "interleaved" rotates the pairs
    (2i, 2i+1) (Wan, HunyuanVideo), "half" the pairs (i, i + D/2) (GPT-NeoX).
    config: the result of vcattn.config(...) or a {field: value} mapping;
    switches: config fields as keywords (e.g. sink_guard=0.5, hadamard=1),
    applied over the method's preset, then over config.
    Head dims on the GPU: 64 and 128; smaller multiples of 8 are zero-padded.
    """
    if is_causal:
        raise NotImplementedError(
            "vcattn: is_causal=True is not supported: V-Smooth reorders the keys by value clusters, so a "
            "causal mask (which needs the key order) cannot be applied; video DiT self-attention is "
            "non-causal. Use SDPA for causal layers.")
    _check_layout(q, k, v, tensor_layout)
    if state is not None and not isinstance(state, LayerState):
        raise TypeError("vcattn: state must be a vcattn.LayerState (e.g. Schedule.layer(name)), got %s"
                        % type(state).__name__)
    fields = _resolve_fields(config, switches)
    sm_scale = _resolve_scale(sm_scale, scale, fields.pop("sm_scale", 0.0))
    finite = fields.pop("check_finite", 1)
    check_finite = bool(finite) if check_finite is None else bool(check_finite)
    if type(q).__module__.startswith("numpy"):
        if rope is not None:
            raise TypeError("vcattn: rope tables are taken with torch tensors only")
        from ._numpy import attention as impl
        out, lse = impl(q, k, v, tensor_layout, sm_scale, method, state, check_finite, fields, return_lse)
    else:
        from ._torch_op import attention as impl
        out, lse = impl(q, k, v, tensor_layout, sm_scale, method, state, check_finite, fields, rope, rope_style,
                        return_lse)
    return (out, lse) if return_lse else out


def _resolve_fields(config, switches):
    """The config field overrides: config's (all of them), then the keywords."""
    if config is None:
        fields = {}
    elif isinstance(config, _capi.Config):
        fields = config_fields(config)
    elif isinstance(config, Mapping):
        fields = dict(config)
    else:
        raise TypeError("vcattn: config must be the result of vcattn.config(...) or a mapping of its fields, "
                        "got %s" % type(config).__name__)
    fields.update(switches)
    return check_switches(fields)


def _resolve_scale(sm_scale, scale, from_config):
    if sm_scale is not None and scale is not None and float(sm_scale) != float(scale):
        raise ValueError("vcattn: sm_scale=%r and scale=%r disagree (scale is an alias)" % (sm_scale, scale))
    given = sm_scale if sm_scale is not None else scale
    if given is None and from_config > 0:
        given = from_config
    return given


class Schedule:
    """The denoising-step state of one generation: one LayerState per
    attention module (created on first use), all at the schedule's step.

        schedule = vcattn.Schedule(num_inference_steps=40)
        for i, t in enumerate(timesteps):
            schedule.step = i
            ... vcattn.attention(q, k, v, state=schedule.layer(name)) ...
    """

    def __init__(self, num_inference_steps):
        if int(num_inference_steps) < 1:
            raise ValueError("vcattn: num_inference_steps must be >= 1, got %r" % (num_inference_steps,))
        self.num_inference_steps = int(num_inference_steps)
        self._step = 0
        self._layers = {}

    @property
    def step(self):
        return self._step

    @step.setter
    def step(self, value):
        value = check_step(value, self.num_inference_steps)
        self._step = value
        for layer in self._layers.values():
            layer.step = value

    def next_step(self):
        """Advances one step; returns the new step."""
        self.step = self._step + 1
        return self._step

    def layer(self, key):
        """The LayerState of one attention module (any hashable key), at the current step."""
        if key not in self._layers:
            layer = LayerState(self.num_inference_steps)
            layer.step = self._step
            self._layers[key] = layer
        return self._layers[key]

    def __len__(self):
        return len(self._layers)
