"""vcattn as a diffusers attention backend, for every model whose attention
processors go through diffusers' dispatcher (`dispatch_attention_fn`): Wan
2.1/2.2 (both A14B experts), Wan2.2-Animate, ChronoEdit, HunyuanVideo,
HunyuanVideo-1.5, LTX-Video, LTX-2, SkyReels-V2, Kandinsky 5, Flux, Flux.2,
Helios and the other AttentionModuleMixin models; Cosmos's self-attention.

    import vcattn.diffusers
    vcattn.diffusers.enable(pipe)                      # every transformer of the pipeline
    video = pipe(prompt, num_inference_steps=40).frames[0]
    vcattn.diffusers.disable(pipe)                     # diffusers' own backends back

    vcattn.diffusers.set_backend(transformer, num_inference_steps=40)   # a bare transformer

Importing this module adds "vcattn" to diffusers' `AttentionBackendName` and
its backend registry, so `transformer.set_attention_backend("vcattn")` and
`with attention_backend("vcattn"):` work too; those calls carry no per-layer
state, so V-Smooth groups each call along the values' principal direction
(the drop-in call: fast, without k-means grouping). `enable` and
`set_backend` add what the grouping schedule needs: a LayerState per
attention call of the transformer's forward (the n-th vcattn call of every
forward is one layer, no user code) and the denoising step, read from the
pipeline (its scheduler's timesteps: any number of steps, a new
`set_timesteps` is a new generation) and from the timestep the transformer
receives (a new value is a new step; per-token timestep tensors count by
their values). The passes of one step (classifier-free guidance run as two
calls) share one grouping: a refresh step groups once.

torch.compile: both ways compile into the graphs diffusers' native backend
gives (`torch.compile(transformer, fullgraph=True)`, or
`transformer.compile_repeated_blocks(fullgraph=True)`), with no recompile
from step to step. The traced code reads only shapes and flags and calls
custom ops; the layer, the step and the grouping plan are found when the ops
run (the transformer's forward hands its timestep to one), so one graph
serves every block and every step. Route counters (`stats`) count calls to
the kernel when the ops run; SDPA routes are counted in eager calls only,
and the one-time warnings are given in eager calls only.

What runs where:
- self-attention and joint text+video attention (query and key of one length): vcattn;
- cross-attention (keys of another length, e.g. the text): diffusers' SDPA, by design;
- masks that hide keys only (padding masks, [B, Nk] or [B, 1, 1, Nk], bool or
  0/-inf): vcattn on the kept keys, exact; any other mask, causal calls,
  dropout: SDPA with a one-time warning (V-Smooth reorders the keys, so a
  general mask cannot follow).
- CogVideoX and Mochi processors call torch SDPA directly, not the dispatcher:
  no backend reaches them, so `enable` refuses them with that reason.
"""
import collections
import ctypes
import functools
import importlib
import inspect
import itertools
import threading
import warnings
from typing import Optional

import torch

from . import _core, _torch_op
from ._sdpa import torch_sdpa

NAME = "vcattn"           # the drop-in backend's name in diffusers
_MEMBER = "VCATTN"        # its AttentionBackendName member
SCHEDULE_NAME = "vcattn-schedule"  # the backend enable()/set_backend() give a transformer's processors
_SCHEDULE_MEMBER = "VCATTN_SCHEDULE"
# Config overrides for another pass of a step that already grouped (e.g. the
# second classifier-free guidance pass): no step is in the grouping window,
# so the layer reuses its permutation, demeaned, instead of grouping again.
_REUSE_GROUPING = {"group_window": 0.0, "demean_outside_window": 1}
# Ops whose work depends on Python state at run time: a CUDA graph would
# replay one step's plan at every step, so the compiler keeps them out of one.
_CUDAGRAPH_UNSAFE = (torch.Tag.cudagraph_unsafe,) if hasattr(torch.Tag, "cudagraph_unsafe") else ()
_local = threading.local()  # .forward: (installation, [calls so far]) of the forward running on this thread
_warned = set()
_installed = {}             # id(transformer) -> _Installation
_by_serial = {}             # serial -> _Installation: how the ops find theirs when they run
_serials = itertools.count(1)
_clock = torch.zeros(1, dtype=torch.int64)  # written by each forward's start, read by its layers' calls
_native = None              # diffusers' native (SDPA) backend function
_templated = None           # diffusers' parallel attention around a backend's forward op (context parallelism)
stats = collections.Counter()  # process-wide: calls per route ("vcattn", "vcattn:rope", "sdpa:cross", ...)


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


# ------------------------------------------------------------ registration

def _dispatcher():
    """diffusers' attention_dispatch module, after checking the internals this
    backend relies on are where diffusers 0.42 has them."""
    try:
        import diffusers
        from diffusers.models import attention_dispatch as ad
    except ImportError as e:
        raise ImportError("vcattn.diffusers needs diffusers (0.42 or newer with the attention dispatcher): %s" % e)
    missing = [n for n in ("AttentionBackendName", "_AttentionBackendRegistry", "dispatch_attention_fn")
               if not hasattr(ad, n)]
    if not missing:
        names, registry = ad.AttentionBackendName, ad._AttentionBackendRegistry
        missing += ["AttentionBackendName.%s" % n for n in ("_member_map_", "_value2member_map_", "_member_names_")
                    if not isinstance(getattr(names, n, None), (dict, list))]
        missing += ["_AttentionBackendRegistry.%s" % n for n in ("_backends", "_constraints", "_supported_arg_names")
                    if not isinstance(getattr(registry, n, None), dict)]
        missing += ["_AttentionBackendRegistry.%s" % n for n in ("register", "get_active_backend")
                    if not callable(getattr(registry, n, None))]
        if "NATIVE" not in names.__members__:
            missing.append("AttentionBackendName.NATIVE")
        params = inspect.signature(ad.dispatch_attention_fn).parameters
        missing += ["dispatch_attention_fn(%s=)" % n for n in ("backend", "attn_mask", "is_causal", "scale")
                    if n not in params]
    if missing:
        raise RuntimeError(
            "vcattn: diffusers %s changed the attention-dispatcher internals vcattn registers with (missing: %s); "
            "vcattn.diffusers is written against diffusers 0.42's diffusers.models.attention_dispatch"
            % (getattr(diffusers, "__version__", "?"), ", ".join(missing)))
    return ad


def _add_member(names, member_name, value):
    """A new member of a str Enum, made as Enum makes its own: diffusers takes
    backends only as AttentionBackendName members (set_attention_backend
    checks __members__, the dispatcher calls AttentionBackendName(value))."""
    member = str.__new__(names, value)
    member._name_, member._value_ = member_name, value
    member.__objclass__ = names
    member._sort_order_ = len(names._member_names_)
    setattr(names, member_name, member)  # before _member_map_: EnumType refuses to reassign members
    names._member_names_.append(member_name)
    names._member_map_[member_name] = member
    names._value2member_map_[value] = member
    return member


def register():
    """Adds "vcattn" (the drop-in call) and "vcattn-schedule" (the layers of a
    transformer under enable()/set_backend()) to diffusers'
    AttentionBackendName and its backend registry (once); returns the
    "vcattn" member."""
    global _native, _templated
    ad = _dispatcher()
    registry = ad._AttentionBackendRegistry
    _native = registry._backends[ad.AttentionBackendName.NATIVE]
    _templated = getattr(ad, "_templated_context_parallel_attention", None)
    members = []
    for name, member_name, fn in ((NAME, _MEMBER, attention_backend),
                                  (SCHEDULE_NAME, _SCHEDULE_MEMBER, schedule_backend)):
        member = ad.AttentionBackendName._value2member_map_.get(name)
        if member is None:
            member = _add_member(ad.AttentionBackendName, member_name, name)
        if registry._backends.get(member) is not fn:
            registry.register(member, constraints=[], supports_context_parallel=True)(fn)
        members.append(member)
    return members[0]


def _schedule_member():
    register()
    return _dispatcher().AttentionBackendName._value2member_map_[SCHEDULE_NAME]


# ------------------------------------------------------------ the backend
#
# What runs inside torch.compile's trace is the routing below: it reads only
# shapes, dtypes and flags (no tensor values, no Python state written, no
# warnings under the compiler) and ends in a custom op, opaque to the
# compiler. Everything stateful happens when those ops run: the step of
# a transformer (vcattn::dit_forward, called first by its forward), the layer a
# call belongs to (its place among the forward's vcattn calls), the layer's
# grouping plan, key-padding masks, the route counters. So one compiled graph
# serves every block and every step, with nothing to guard on.

def _padding_mask(mask, batch, nk):
    """A mask shaped like a key-padding mask ([B, Nk], or [B|1, 1.., Nk]) as a
    [B, Nk] view, else None (from its shape alone: its values are checked when
    the op runs)."""
    if mask.ndim == 2 and tuple(mask.shape) == (batch, nk):
        return mask
    if mask.ndim in (3, 4) and mask.shape[-1] == nk and mask.shape[0] in (1, batch) and \
            all(s == 1 for s in mask.shape[1:-1]):
        return mask.reshape(mask.shape[0], nk).expand(batch, nk)
    return None


def _keep_keys(mask):
    """The [B, Nk] bool keep-mask of a key-padding mask, or None when its
    values are not a keep/hide mask (bool, or additive 0 / -inf)."""
    if mask.dtype == torch.bool:
        return mask
    if mask.is_floating_point():  # additive: 0 keeps, -inf (or the dtype's lowest) hides
        keep, hide = mask == 0, mask <= torch.finfo(mask.dtype).min / 2
        if bool((keep | hide).all()):
            return keep
    return None


def _count(route):
    """Counts a route taken in the trace: only for eager calls (the counter is
    Python state, which a traced path must not write)."""
    if not torch.compiler.is_compiling():
        stats[route] += 1


def _sdpa(reason, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_lse):
    _count("sdpa:" + reason)
    return _native(query=query, key=key, value=value, attn_mask=attn_mask, dropout_p=dropout_p,
                   is_causal=is_causal, scale=scale, enable_gqa=enable_gqa, return_lse=return_lse)


def _rotate(x, cos, sin, style=0):
    """RoPE of x [B, S, H, D] by float tables [S, D/2] or [B or 1, H or 1, S,
    D/2], in float32 and back in x's dtype, as diffusers' processors apply
    it: the SDPA routes of a call that came with its RoPE tables. style:
    0 interleaved pairs (2i, 2i+1), 1 the pairs (i, i + D/2)."""
    if style:
        x1, x2 = x.float().chunk(2, dim=-1)
    else:
        x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    if cos.ndim == 2:
        c, s = cos.float()[None, :, None, :], sin.float()[None, :, None, :]
    else:
        c, s = cos.float().transpose(1, 2), sin.float().transpose(1, 2)
    y1, y2 = x1 * c - x2 * s, x1 * s + x2 * c
    return (torch.cat((y1, y2), -1) if style else torch.stack((y1, y2), -1).flatten(-2)).to(x.dtype)


def _beyond_vcattn(query, is_causal, dropout_p):
    """(route, message) for a call vcattn cannot run whatever its mask and
    length, else None."""
    if is_causal:
        return "causal", "causal attention (V-Smooth reorders the keys)"
    if dropout_p:
        return "dropout", "dropout_p > 0"
    if query.device.type not in ("cpu", "cuda"):
        return "device", "tensors on %s" % query.device.type
    if query.is_cuda and query.shape[-1] > max(_core._GPU_HEAD_DIMS):
        return "head_dim", "head dim %d on the GPU (64 and 128; smaller ones padded)" % query.shape[-1]
    return None


def _route(scheduled, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_lse,
           _parallel_config, rope=None, rope_style="interleaved"):
    """rope: (cos, sin) [S, D/2] or [B or 1, H or 1, S, D/2] tables for query
    and key given before their rotary embedding (rope_style: "interleaved"
    pairs or "half" the pairs (i, i + D/2)): applied inside vcattn's
    quantizers, or here before an SDPA route."""
    style = _torch_op.ROPE_STYLES[rope_style]
    if getattr(_parallel_config, "context_parallel_config", None) is not None:
        return _route_parallel(scheduled, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                               return_lse, _parallel_config, rope, style)
    batch, nq, nk = query.shape[0], query.shape[1], key.shape[1]
    key_mask = None
    # cross-attention to a short context: little to gain, kept exact
    why = ("cross", None) if nq != nk else _beyond_vcattn(query, is_causal, dropout_p)
    if why is None and _core.too_short_for_gpu(query.device.type, nk):  # faster on SDPA (set_sdpa_below_keys)
        why = "short", None
    if why is None and attn_mask is not None:
        key_mask = _padding_mask(attn_mask, batch, nk)
        if key_mask is None:
            why = "mask", "an attention mask that is not a key-padding mask"
        elif return_lse:
            why = "mask", "a key-padding mask with return_lse"
    if why is not None:
        if why[1] is not None and not torch.compiler.is_compiling():
            _warn_once(why[0], "vcattn: %s runs on SDPA (diffusers' native backend); further such calls do too"
                       % why[1])
        if rope is not None:
            query, key = _rotate(query, *rope, style), _rotate(key, *rope, style)
        return _sdpa(why[0], query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_lse)
    q, k, v, scale, d, cos, sin, _ = _torch_op.prepare(query, key, value, scale, "NHD", rope, rope_style)
    if scheduled:
        out, lse = torch.ops.vcattn.dit_layer_attention(q, k, v, _clock, scale, key_mask, cos, sin, return_lse, style)
    elif key_mask is not None:  # never with return_lse (routed to SDPA above)
        out, lse = torch.ops.vcattn.dit_masked_attention(q, k, v, scale, key_mask, cos, sin, style)
    else:
        out, lse = torch.ops.vcattn.dit_attention(q, k, v, scale, cos, sin, return_lse, style)
    if out.shape[-1] != d:
        out = out[..., :d]
    return (out, lse) if return_lse else out


def _route_parallel(scheduled, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_lse,
                    config, rope, style):
    """diffusers' context parallelism (Ulysses: an all-to-all over heads; a
    ring over key chunks merged through their LSE; or both): diffusers' own
    collectives around vcattn's call, which returns the LSE the ring merges
    by. A scheduled call keeps a layer state per call of the forward: under
    Ulysses a rank calls once per layer, on whole heads; under a ring once
    per layer and key chunk, in the same order every forward (chunk
    rank + i at ring step i), so each state always sees the same keys.
    rope: this rank's tables (style: their pairs), applied before the tokens move."""
    if rope is not None:
        query, key = _rotate(query, *rope, style), _rotate(key, *rope, style)
    beyond = _beyond_vcattn(query, is_causal, dropout_p)
    why = beyond[1] if beyond else None
    if why is None and attn_mask is not None:
        why = "an attention mask"
    elif why is None and (enable_gqa or query.shape[2] != key.shape[2]):
        why = "grouped-query heads (diffusers' parallel attention takes equal heads)"
    if why is not None:
        if not torch.compiler.is_compiling():
            _warn_once("parallel:" + why, "vcattn: %s under context parallelism runs on diffusers' native backend; "
                                          "further such calls do too" % why)
        _count("sdpa:parallel")
        return _native(query=query, key=key, value=value, attn_mask=attn_mask, dropout_p=dropout_p,
                       is_causal=is_causal, scale=scale, enable_gqa=enable_gqa, return_lse=return_lse,
                       _parallel_config=config)
    if _templated is None:
        raise RuntimeError("vcattn: this diffusers has no _templated_context_parallel_attention (diffusers 0.42's "
                           "parallel attention, which vcattn's context parallelism runs in)")
    forward_op = _parallel_layer_forward_op if scheduled else _parallel_forward_op
    return _templated(query, key, value, None, 0.0, False, scale, False, return_lse, forward_op=forward_op,
                     backward_op=_parallel_backward_op, _parallel_config=config)


def _parallel_forward_op(ctx, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                         enable_gqa=False, return_lse=False, _save_ctx=True, _parallel_config=None):
    """One rank's attention inside diffusers' parallel attention: [B, S, H, D]
    in, (out, lse [B, S, H]) out. Short sequences stay on vcattn here (the
    ring merges by the LSE, which diffusers' native backend does not give)."""
    return _parallel_call(False, query, key, value, scale, return_lse)


def _parallel_layer_forward_op(ctx, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                               enable_gqa=False, return_lse=False, _save_ctx=True, _parallel_config=None):
    """As _parallel_forward_op, with the state of this call of the forward."""
    return _parallel_call(True, query, key, value, scale, return_lse)


def _parallel_call(scheduled, query, key, value, scale, return_lse):
    q, k, v, scale, d, _, _, _ = _torch_op.prepare(query, key, value, scale, "NHD")
    if scheduled:
        out, lse = torch.ops.vcattn.dit_layer_attention(q, k, v, _clock, scale, None, None, None, return_lse)
    else:
        out, lse = torch.ops.vcattn.dit_attention(q, k, v, scale, None, None, return_lse)
    if out.shape[-1] != d:
        out = out[..., :d]
    return (out, lse.transpose(1, 2)) if return_lse else out


def _parallel_backward_op(ctx, grad_out, *args, **kwargs):
    raise RuntimeError("vcattn: inference only (there is no backward)")


def attention_backend(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                      enable_gqa=False, return_lse=False, _parallel_config=None):
    """The "vcattn" backend (the drop-in call): diffusers' dispatcher
    signature, [B, S, H, D] tensors; GQA is native (Hq a multiple of Hkv)."""
    return _route(False, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_lse,
                  _parallel_config)


def schedule_backend(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                     enable_gqa=False, return_lse=False, _parallel_config=None):
    """The "vcattn-schedule" backend enable()/set_backend() give a
    transformer's processors: as "vcattn", with the layer's state and the
    step (the op finds both when it runs)."""
    return _route(True, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_lse,
                  _parallel_config)


def _masked(call, q, k, v, key_mask, scale, cos, sin, style):
    """Run time: call(q, k, v, rope) under a key-padding mask: the kept keys
    of each sample (exact), or SDPA where the mask's values are not keep/hide
    or a row would keep no key. cos, sin: RoPE tables or None (style: their
    pairs, vcattn_rope_style). Returns
    call's (out, lse); under a mask the lse is None (a call that asks for
    one never brings a mask here: it is routed to SDPA first)."""
    rope = None
    if cos is not None:
        stats["vcattn:rope"] += 1  # calls that brought q and k unrotated, with their tables
        rope = (cos, sin, cos, sin, style)
    if key_mask is None:
        return call(q, k, v, rope)
    keep = _keep_keys(key_mask)
    if keep is None or not bool(keep.any(dim=1).all()):
        stats["sdpa:mask"] += 1
        _warn_once("mask-values", "vcattn: a key-padding mask that is not keep/hide or hides every key of a row runs "
                                  "on SDPA; further such calls do too")
        if cos is not None:
            q, k = _rotate(q, cos, sin, style), _rotate(k, cos, sin, style)
        out = torch_sdpa(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=key_mask[:, None, None, :],
            scale=scale, enable_gqa=q.shape[2] != k.shape[2]).transpose(1, 2).contiguous()
        return out, None
    if bool(keep.all()):
        return call(q, k, v, rope)
    outs = []
    for i in range(q.shape[0]):
        kept = keep[i]
        rope_i = None
        if cos is not None and cos.ndim == 2:
            rope_i = (cos, sin, cos[kept].contiguous(), sin[kept].contiguous(), style)
        elif cos is not None:  # [B or 1, H or 1, S, D/2]: sample i's rows
            qc, qs = (t[i:i + 1] if t.shape[0] > 1 else t for t in (cos, sin))
            rope_i = (qc, qs, qc[:, :, kept], qs[:, :, kept], style)
        outs.append(call(q[i:i + 1], k[i:i + 1, kept], v[i:i + 1, kept], rope_i)[0])
    return torch.cat(outs), None


def _dropin(q, k, v, scale, key_mask, cos, sin, want_lse, style):
    def call(q, k, v, rope):
        stats["vcattn"] += 1
        return _torch_op.run(q, k, v, "NHD", scale, "vc", {}, None, False, rope, want_lse)
    return _torch_op.op_outputs(q, *_masked(call, q, k, v, key_mask, scale, cos, sin, style))


@torch.library.custom_op("vcattn::dit_attention", mutates_args=())
def _dropin_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, rope_cos: Optional[torch.Tensor],
               rope_sin: Optional[torch.Tensor], want_lse: bool = True,
               rope_style: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A drop-in call ([B, S, H, D]; no layer state): the principal order. It
    never waits for the GPU, so a CUDA graph may hold it. Its lse is empty
    unless want_lse."""
    return _dropin(q, k, v, scale, None, rope_cos, rope_sin, want_lse, rope_style)


@torch.library.custom_op("vcattn::dit_masked_attention", mutates_args=(), tags=_CUDAGRAPH_UNSAFE)
def _masked_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, key_mask: torch.Tensor,
               rope_cos: Optional[torch.Tensor], rope_sin: Optional[torch.Tensor],
               rope_style: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A drop-in call under a key-padding mask: its values are read on the
    host (which keys each sample keeps), so no CUDA graph may hold it. No
    LSE (empty): a call that asks for one is routed to SDPA."""
    return _dropin(q, k, v, scale, key_mask, rope_cos, rope_sin, False, rope_style)


@torch.library.custom_op("vcattn::dit_layer_attention", mutates_args=(), tags=_CUDAGRAPH_UNSAFE)
def _layer_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, clock: torch.Tensor, scale: float,
              key_mask: Optional[torch.Tensor], rope_cos: Optional[torch.Tensor],
              rope_sin: Optional[torch.Tensor], want_lse: bool = True,
              rope_style: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A call of a transformer under enable()/set_backend(): the layer is its
    place among the vcattn calls of the forward that vcattn::dit_forward
    began (clock orders the two in a graph). Its lse is empty unless
    want_lse (and always under a key-padding mask)."""
    forward = getattr(_local, "forward", None)
    want_lse = want_lse and key_mask is None

    def call(q, k, v, rope):
        stats["vcattn"] += 1
        if forward is None:  # no forward of an installed transformer began on this thread
            return _torch_op.run(q, k, v, "NHD", scale, "vc", {}, None, False, rope, want_lse)
        inst, counter = forward
        counter[0] += 1
        return inst.run(counter[0] - 1, q, k, v, scale, rope, want_lse)
    return _torch_op.op_outputs(q, *_masked(call, q, k, v, key_mask, scale, rope_cos, rope_sin, rope_style))


@_dropin_op.register_fake
def _(q, k, v, scale, rope_cos, rope_sin, want_lse=True, rope_style=0):
    return _torch_op.fake_outputs(q, "NHD", want_lse)


@_masked_op.register_fake
def _(q, k, v, scale, key_mask, rope_cos, rope_sin, rope_style=0):
    return _torch_op.fake_outputs(q, "NHD", False)


@_layer_op.register_fake
def _(q, k, v, clock, scale, key_mask, rope_cos, rope_sin, want_lse=True, rope_style=0):
    return _torch_op.fake_outputs(q, "NHD", want_lse and key_mask is None)


@torch.library.custom_op("vcattn::dit_forward", mutates_args=("clock",), tags=_CUDAGRAPH_UNSAFE)
def _forward_op(clock: torch.Tensor, timestep: Optional[torch.Tensor], installation: int) -> None:
    """A forward of installed transformer `installation` begins: its step from
    the timestep, its layers counted from 0. Writes clock, which every
    vcattn::dit_layer_attention reads, so a graph keeps them in order."""
    inst = _by_serial.get(installation)
    if inst is not None:
        inst.steps.before_forward(timestep)
        _local.forward = (inst, [0])
    clock.add_(1)


@_forward_op.register_fake
def _(clock, timestep, installation):
    return None


# ------------------------------------------------------------ RoPE inside the quantizers

def _rope_processors():
    """{diffusers processor class: a function making its fused-RoPE
    replacement from a stock instance}, for the models whose RoPE form the
    quantizers take; a model diffusers moved is left out (its RoPE then
    stays in PyTorch)."""
    def wan(module):  # Wan's processor, under another name or copied into other Wan models' modules
        return lambda stock: WanRopeProcessor(stock, module._get_qkv_projections)

    def flux(module):  # Flux's, and Flux.2's double-stream blocks
        return lambda stock: FluxRopeProcessor(stock, module._get_qkv_projections)

    def plain(cls):
        return lambda module: cls
    processors = (("transformer_wan", "WanAttnProcessor", wan),
                  ("transformer_skyreels_v2", "SkyReelsV2AttnProcessor", wan),
                  ("transformer_wan_animate", "WanAttnProcessor", wan),  # Wan2.2-Animate
                  ("transformer_chronoedit", "WanAttnProcessor", wan),
                  ("transformer_flux", "FluxAttnProcessor", flux),
                  ("transformer_flux2", "Flux2AttnProcessor", flux),
                  # Flux.2's single-stream blocks: q, k, v and the MLP from one projection
                  ("transformer_flux2", "Flux2ParallelSelfAttnProcessor", plain(Flux2ParallelRopeProcessor)),
                  ("transformer_hunyuan_video15", "HunyuanVideo15AttnProcessor2_0", plain(HunyuanVideo15Processor)),
                  ("transformer_hunyuan_video", "HunyuanVideoAttnProcessor2_0", plain(HunyuanVideoRopeProcessor)),
                  ("transformer_ltx", "LTXVideoAttnProcessor", plain(LTXVideoRopeProcessor)),
                  ("transformer_ltx2", "LTX2AudioVideoAttnProcessor", plain(LTX2RopeProcessor)),
                  ("transformer_ltx2", "LTX2PerturbedAttnProcessor", plain(LTX2RopeProcessor)),
                  ("transformer_kandinsky", "Kandinsky5AttnProcessor", plain(Kandinsky5RopeProcessor)),
                  ("transformer_cosmos", "CosmosAttnProcessor2_0", plain(CosmosRopeProcessor)),
                  ("transformer_helios", "HeliosAttnProcessor",
                   lambda module: lambda stock: HeliosRopeProcessor(stock, module._get_qkv_projections)))
    found = {}
    for module_name, class_name, make in processors:
        try:
            module = importlib.import_module("diffusers.models.transformers." + module_name)
            found[getattr(module, class_name)] = make(module)
        except (ImportError, AttributeError):
            pass
    return found


class _FusedRopeProcessor:
    """A stock diffusers processor, wrapped: diffusers' set/reset_attention_backend
    address the wrapper as they would the stock processor."""

    def __init__(self, stock):
        self.stock = stock

    @property
    def _attention_backend(self):
        return self.stock._attention_backend

    @_attention_backend.setter
    def _attention_backend(self, value):
        self.stock._attention_backend = value

    @property
    def _parallel_config(self):
        return getattr(self.stock, "_parallel_config", None)

    @_parallel_config.setter
    def _parallel_config(self, value):  # transformer.enable_parallelism sets it
        self.stock._parallel_config = value

    def _attend(self, query, key, value, rope, rope_style="interleaved", mask=None):
        """The layer's vcattn call with its RoPE tables: q, k, v [B, S, H, D]
        (q and k unrotated) in, [B, S, H*D] in query's dtype out."""
        out = _route(True, query, key, value, mask, 0.0, False, None, False, False, self._parallel_config,
                     rope=rope, rope_style=rope_style)
        return out.flatten(2, 3).to(query.dtype)


def _project_out(attn, hidden_states):
    """The output projection (and dropout) of diffusers' attention modules."""
    return attn.to_out[1](attn.to_out[0](hidden_states))


def _pair_tables(cos, sin, tokens, head_dim):
    """diffusers' [S, D] tables, each angle repeated for its pair (2i, 2i+1),
    as the quantizers' [S, D/2]; None if they are not of that form."""
    if cos.ndim != 2 or tuple(cos.shape) != (tokens, head_dim) or tuple(sin.shape) != (tokens, head_dim):
        return None
    return cos[:, 0::2], sin[:, 0::2]


class WanRopeProcessor(_FusedRopeProcessor):
    """diffusers' WanAttnProcessor with Wan's self-attention RoPE applied
    inside vcattn's quantizers: q and k reach the kernel unrotated, with
    Wan's cos/sin tables, instead of as rotated copies made in PyTorch (two
    full passes over q and k). Every other call (cross-attention, the I2V
    image branch, no rotary embedding) runs the stock processor."""

    def __init__(self, stock, projections):
        super().__init__(stock)
        self.projections = projections  # diffusers' q, k, v projection helper

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary_emb=None):
        freqs = rotary_emb
        if encoder_hidden_states is not None or attn.add_k_proj is not None or freqs is None or \
                freqs[0].ndim != 4 or freqs[0].shape[0] != 1 or freqs[0].shape[2] != 1:
            return self.stock(attn, hidden_states, encoder_hidden_states, attention_mask, rotary_emb)
        query, key, value = self.projections(attn, hidden_states, None)
        query = attn.norm_q(query).unflatten(2, (attn.heads, -1))
        key = attn.norm_k(key).unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))
        # Wan's tables repeat each pair's angle: cos at the even, sin at the odd channels
        rope = (freqs[0][0, :, 0, 0::2], freqs[1][0, :, 0, 1::2])
        return _project_out(attn, self._attend(query, key, value, rope, mask=attention_mask))


def _per_head_tables(freqs, heads):
    """LTX's (cos, sin) [B, S, H*D] over the inner dimension (each pair's
    angle repeated) as per-head [B, H, S, D/2] tables: one angle a pair, the
    rows of a token's heads side by side."""
    return tuple(t[..., 0::2].contiguous().unflatten(2, (heads, -1)).transpose(1, 2) for t in freqs)


class LTXVideoRopeProcessor(_FusedRopeProcessor):
    """diffusers' LTXVideoAttnProcessor with the self-attention's RoPE inside
    vcattn's quantizers. LTX-Video rotates the whole inner dimension before
    it splits the heads, so each head has its own frequencies: its [B, S,
    H*D] tables (each pair's angle repeated) reach the quantizers as
    per-head [B, H, S, D/2] ones. Cross-attention and masked calls run the
    stock processor."""

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, image_rotary_emb=None):
        if encoder_hidden_states is not None or attention_mask is not None or image_rotary_emb is None or \
                image_rotary_emb[0].ndim != 3 or image_rotary_emb[0].shape[1] != hidden_states.shape[1]:
            return self.stock(attn, hidden_states, encoder_hidden_states, attention_mask, image_rotary_emb)
        query = attn.norm_q(attn.to_q(hidden_states)).unflatten(2, (attn.heads, -1))
        key = attn.norm_k(attn.to_k(hidden_states)).unflatten(2, (attn.heads, -1))
        value = attn.to_v(hidden_states).unflatten(2, (attn.heads, -1))
        cos, sin = _per_head_tables(image_rotary_emb, attn.heads)
        return _project_out(attn, self._attend(query, key, value, (cos, sin)))


class LTX2RopeProcessor(_FusedRopeProcessor):
    """diffusers' LTX-2 processors (LTX2AudioVideoAttnProcessor and
    LTX2PerturbedAttnProcessor) with the self-attention's RoPE inside vcattn's
    quantizers: "interleaved" tables [B, S, H*D] as LTX-Video's, "split"
    tables [B, H, S, D/2] as they are (pairs (i, i + D/2) of each head), then
    the per-head gates as the stock processor. Cross-attention (the
    audio-video attention has keys of the other modality), masked calls,
    other table forms and perturbed (STG) passes run the stock processor."""

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, query_rotary_emb=None,
                 key_rotary_emb=None, **perturbation):
        tables = _ltx2_tables(attn, hidden_states, query_rotary_emb)
        if encoder_hidden_states is not None or attention_mask is not None or tables is None or \
                (key_rotary_emb is not None and key_rotary_emb is not query_rotary_emb) or \
                perturbation.get("perturbation_mask") is not None or perturbation.get("all_perturbed"):
            return self.stock(attn, hidden_states, encoder_hidden_states, attention_mask, query_rotary_emb,
                              key_rotary_emb, **perturbation)
        cos, sin, style = tables
        gate_logits = attn.to_gate_logits(hidden_states) if attn.to_gate_logits is not None else None
        query = attn.norm_q(attn.to_q(hidden_states)).unflatten(2, (attn.heads, -1))
        key = attn.norm_k(attn.to_k(hidden_states)).unflatten(2, (attn.heads, -1))
        value = attn.to_v(hidden_states).unflatten(2, (attn.heads, -1))
        hidden_states = self._attend(query, key, value, (cos, sin), style)
        if gate_logits is not None:  # the factor 2: zero logits give gates of 1
            gates = 2.0 * torch.sigmoid(gate_logits)
            hidden_states = (hidden_states.unflatten(2, (attn.heads, -1)) * gates.unsqueeze(-1)).flatten(2, 3)
        hidden_states = attn.to_out[0](hidden_states)
        return attn.to_out[1](hidden_states)


def _ltx2_tables(attn, hidden_states, freqs):
    """(cos, sin, style) as the quantizers take LTX-2's tables, or None for a
    form they cannot express (split tables over the whole inner dimension)."""
    if freqs is None or freqs[0].shape != freqs[1].shape:
        return None
    batch, tokens, inner = hidden_states.shape[0], hidden_states.shape[1], attn.heads * attn.head_dim
    cos, sin = freqs
    if attn.rope_type == "interleaved" and tuple(cos.shape) in ((batch, tokens, inner), (1, tokens, inner)):
        return (*_per_head_tables(freqs, attn.heads), "interleaved")
    if attn.rope_type == "split" and cos.ndim == 4 and cos.shape[1:] == (attn.heads, tokens, attn.head_dim // 2):
        return cos, sin, "half"
    return None


class CosmosRopeProcessor(_FusedRopeProcessor):
    """diffusers' CosmosAttnProcessor2_0 with the self-attention's RoPE inside
    vcattn's quantizers. Cosmos rotates the pairs (i, i + D/2) by [S, D]
    tables that repeat each angle in both halves: the first halves are the
    quantizers' [S, D/2] tables. Its stock processor names no attention
    backend (it runs on diffusers' process-wide default), so this processor
    is how Cosmos's self-attention reaches vcattn; cross-attention and masked
    calls run the stock processor."""

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, image_rotary_emb=None):
        if encoder_hidden_states is not None or attention_mask is not None or image_rotary_emb is None or \
                image_rotary_emb[0].ndim != 2 or image_rotary_emb[0].shape[0] != hidden_states.shape[1]:
            return self.stock(attn, hidden_states, encoder_hidden_states, attention_mask, image_rotary_emb)
        query = attn.norm_q(attn.to_q(hidden_states).unflatten(2, (attn.heads, -1)))
        key = attn.norm_k(attn.to_k(hidden_states).unflatten(2, (attn.heads, -1)))
        value = attn.to_v(hidden_states).unflatten(2, (attn.heads, -1))
        half = query.shape[-1] // 2
        cos, sin = (t[:, :half] for t in image_rotary_emb)
        return _project_out(attn, self._attend(query, key, value, (cos, sin), "half"))


class HeliosRopeProcessor(_FusedRopeProcessor):
    """diffusers' HeliosAttnProcessor with the self-attention's RoPE inside
    vcattn's quantizers: Helios's per-sample [B, S, 2D] table (cos, then
    sin, each pair's angle repeated) as [B, 1, S, D/2] tables of interleaved
    pairs. Cross-attention, masked calls and the amplified history keys
    (scaled after their rotation) run the stock processor."""

    def __init__(self, stock, projections):
        super().__init__(stock)
        self.projections = projections  # diffusers' q, k, v projection helper

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary_emb=None,
                 original_context_length=None):
        history = original_context_length is not None and hidden_states.shape[1] > original_context_length
        if encoder_hidden_states is not None or attention_mask is not None or rotary_emb is None or \
                rotary_emb.ndim != 3 or rotary_emb.shape[1] != hidden_states.shape[1] or \
                (attn.is_amplify_history and history):
            return self.stock(attn, hidden_states, encoder_hidden_states, attention_mask, rotary_emb,
                              original_context_length)
        query, key, value = self.projections(attn, hidden_states, None)
        query = attn.norm_q(query).unflatten(2, (attn.heads, -1))
        key = attn.norm_k(key).unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))
        cos, sin = rotary_emb.unsqueeze(1).chunk(2, dim=-1)  # the angle of pair i at 2i (cos) and 2i + 1 (sin)
        return _project_out(attn, self._attend(query, key, value, (cos[..., 0::2], sin[..., 1::2])))


def _heads(attn, x, projection, norm=None):
    """A projection of x as [B, S, H, D], normalised where the model does."""
    x = projection(x).unflatten(2, (attn.heads, -1))
    return norm(x) if norm is not None else x


def _text_rows(cos, sin, text):
    """The tables with `text` identity rows (cos 1, sin 0) after them: the
    text tokens at the end of a joint sequence stay unrotated."""
    return (torch.cat([cos, cos.new_ones(text, cos.shape[1])]),
            torch.cat([sin, sin.new_zeros(text, sin.shape[1])]))


def _hunyuan_outputs(attn, hidden_states, text):
    """HunyuanVideo's output projections of the joint sequence [B, N, H*D]:
    the video tokens through to_out, the last `text` tokens through to_add_out."""
    hidden_states, encoder_hidden_states = hidden_states[:, :-text], hidden_states[:, -text:]
    if getattr(attn, "to_out", None) is not None:
        hidden_states = attn.to_out[1](attn.to_out[0](hidden_states))
    if getattr(attn, "to_add_out", None) is not None:
        encoder_hidden_states = attn.to_add_out(encoder_hidden_states)
    return hidden_states, encoder_hidden_states


class HunyuanVideoRopeProcessor(_FusedRopeProcessor):
    """diffusers' HunyuanVideoAttnProcessor2_0 with the video tokens' RoPE
    applied inside vcattn's quantizers. The joint sequence is the video
    tokens then the text tokens (appended by the block, or by the processor
    for the dual-stream blocks); the text tokens are not rotated, so their
    rows of the tables are the identity (cos 1, sin 0), which rotates
    nothing. Calls without rotary embeddings, or with tables of another
    form, run the stock processor."""

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, image_rotary_emb=None):
        joint = attn.add_q_proj is not None and encoder_hidden_states is not None
        tables = None
        if image_rotary_emb is not None:  # for the video tokens, all of hidden_states
            tables = _pair_tables(image_rotary_emb[0], image_rotary_emb[1], hidden_states.shape[1],
                                  attn.to_q.out_features // attn.heads)
        if tables is None:
            return self.stock(attn, hidden_states, encoder_hidden_states, attention_mask, image_rotary_emb)
        text = encoder_hidden_states.shape[1] if encoder_hidden_states is not None else 0
        if not joint and encoder_hidden_states is not None:
            hidden_states = torch.cat([hidden_states, encoder_hidden_states], dim=1)
        query = _heads(attn, hidden_states, attn.to_q, attn.norm_q)
        key = _heads(attn, hidden_states, attn.to_k, attn.norm_k)
        value = _heads(attn, hidden_states, attn.to_v)
        if joint:
            query = torch.cat([query, _heads(attn, encoder_hidden_states, attn.add_q_proj, attn.norm_added_q)], dim=1)
            key = torch.cat([key, _heads(attn, encoder_hidden_states, attn.add_k_proj, attn.norm_added_k)], dim=1)
            value = torch.cat([value, _heads(attn, encoder_hidden_states, attn.add_v_proj)], dim=1)
        hidden_states = self._attend(query, key, value, _text_rows(*tables, text), mask=attention_mask)
        if encoder_hidden_states is None:
            return hidden_states
        return _hunyuan_outputs(attn, hidden_states, text)


class FluxRopeProcessor(_FusedRopeProcessor):
    """diffusers' FluxAttnProcessor with the joint sequence's RoPE (text
    tokens first, then the image tokens, all with their positions) applied
    inside vcattn's quantizers. Calls without rotary embeddings, or with
    tables of another form, run the stock processor."""

    def __init__(self, stock, projections):
        super().__init__(stock)
        self.projections = projections  # diffusers' q, k, v projection helper

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, image_rotary_emb=None):
        text = encoder_hidden_states.shape[1] if encoder_hidden_states is not None else 0
        tables = None
        if image_rotary_emb is not None:
            joint = hidden_states.shape[1] + (text if attn.added_kv_proj_dim is not None else 0)
            tables = _pair_tables(image_rotary_emb[0], image_rotary_emb[1], joint, attn.head_dim)
        if tables is None:
            return self.stock(attn, hidden_states, encoder_hidden_states, attention_mask, image_rotary_emb)
        query, key, value, encoder_query, encoder_key, encoder_value = self.projections(
            attn, hidden_states, encoder_hidden_states)
        query = attn.norm_q(query.unflatten(-1, (-1, attn.head_dim)))
        key = attn.norm_k(key.unflatten(-1, (-1, attn.head_dim)))
        value = value.unflatten(-1, (-1, attn.head_dim))
        if attn.added_kv_proj_dim is not None:
            encoder_query = attn.norm_added_q(encoder_query.unflatten(-1, (-1, attn.head_dim)))
            encoder_key = attn.norm_added_k(encoder_key.unflatten(-1, (-1, attn.head_dim)))
            encoder_value = encoder_value.unflatten(-1, (-1, attn.head_dim))
            query = torch.cat([encoder_query, query], dim=1)
            key = torch.cat([encoder_key, key], dim=1)
            value = torch.cat([encoder_value, value], dim=1)
        hidden_states = self._attend(query, key, value, tables, mask=attention_mask)
        if encoder_hidden_states is None:
            return hidden_states
        encoder_hidden_states, hidden_states = hidden_states.split_with_sizes(
            [text, hidden_states.shape[1] - text], dim=1)
        hidden_states = attn.to_out[1](attn.to_out[0](hidden_states.contiguous()))
        encoder_hidden_states = attn.to_add_out(encoder_hidden_states.contiguous())
        return hidden_states, encoder_hidden_states


class Flux2ParallelRopeProcessor(_FusedRopeProcessor):
    """diffusers' Flux2ParallelSelfAttnProcessor (Flux.2's single-stream
    blocks: one projection gives q, k, v and the MLP's input, one projection
    takes the attention and the MLP's output) with the joint sequence's
    RoPE applied inside vcattn's quantizers. Calls without rotary
    embeddings, or with tables of another form, run the stock processor."""

    def __call__(self, attn, hidden_states, attention_mask=None, image_rotary_emb=None):
        tables = None
        if image_rotary_emb is not None:
            tables = _pair_tables(image_rotary_emb[0], image_rotary_emb[1], hidden_states.shape[1], attn.head_dim)
        if tables is None:
            return self.stock(attn, hidden_states, attention_mask, image_rotary_emb)
        projected = attn.to_qkv_mlp_proj(hidden_states)
        # the q, k, v part by the two parts' ratio (also on a column-sharded projection)
        qkv_dim, mlp_dim = 3 * attn.inner_dim, attn.mlp_hidden_dim * attn.mlp_mult_factor
        width = projected.shape[-1] * qkv_dim // (qkv_dim + mlp_dim)
        qkv, mlp = projected.split([width, projected.shape[-1] - width], dim=-1)
        query, key, value = (x.unflatten(-1, (-1, attn.head_dim)) for x in qkv.chunk(3, dim=-1))
        hidden_states = self._attend(attn.norm_q(query), attn.norm_k(key), value, tables, mask=attention_mask)
        return attn.to_out(torch.cat([hidden_states, attn.mlp_act_fn(mlp)], dim=-1))


class HunyuanVideo15Processor(_FusedRopeProcessor):
    """diffusers' HunyuanVideo15AttnProcessor2_0 on vcattn. Its joint
    sequence is the video tokens then the text tokens, and its mask the
    outer product of one padding vector: a kept token attends to the kept
    tokens, a padded token to none (SDPA gives its row zeros). vcattn runs
    that as a key-padding mask and zeroes the padded rows after, instead of
    the whole attention going to SDPA for a general mask; the video tokens'
    RoPE is applied inside the quantizers (identity rows for the text).
    Calls of another form run the stock processor."""

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, image_rotary_emb=None):
        tables = None
        if image_rotary_emb is not None and encoder_hidden_states is not None and \
                (attention_mask is None or attention_mask.ndim == 2):
            tables = _pair_tables(image_rotary_emb[0], image_rotary_emb[1], hidden_states.shape[1],
                                  attn.to_q.out_features // attn.heads)
        if tables is None:
            return self.stock(attn, hidden_states, encoder_hidden_states, attention_mask, image_rotary_emb)
        text = encoder_hidden_states.shape[1]
        query = torch.cat([_heads(attn, hidden_states, attn.to_q, attn.norm_q),
                           _heads(attn, encoder_hidden_states, attn.add_q_proj, attn.norm_added_q)], dim=1)
        key = torch.cat([_heads(attn, hidden_states, attn.to_k, attn.norm_k),
                         _heads(attn, encoder_hidden_states, attn.add_k_proj, attn.norm_added_k)], dim=1)
        value = torch.cat([_heads(attn, hidden_states, attn.to_v),
                           _heads(attn, encoder_hidden_states, attn.add_v_proj)], dim=1)
        keep = None
        if attention_mask is not None:  # [B, text] or [B, tokens]: the video tokens are kept
            keep = torch.nn.functional.pad(attention_mask, (query.shape[1] - attention_mask.shape[1], 0),
                                           value=True).bool()
        hidden_states = self._attend(query, key, value, _text_rows(*tables, text), mask=keep)
        if keep is not None:
            hidden_states = hidden_states.masked_fill(~keep[:, :, None], 0)
        return _hunyuan_outputs(attn, hidden_states, text)


class Kandinsky5RopeProcessor(_FusedRopeProcessor):
    """diffusers' Kandinsky5AttnProcessor with the self-attention's RoPE
    (the text blocks' and the visual blocks') applied inside vcattn's
    quantizers. Kandinsky 5 gives each pair (2i, 2i+1) its rotation matrix
    [[cos, -sin], [sin, cos]] ([B, S, 1, D/2, 2, 2]); its stock processor
    rounds the rotated q and k to BF16, whatever the model's dtype, so the
    fused call differs from it by that rounding. Cross-attention, sparse
    (NABLA) attention, a batch of more than one sample (tables per sample)
    and tables of another form run the stock processor."""

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, rotary_emb=None, sparse_params=None):
        tables = None
        head_dim = attn.to_query.out_features // attn.num_heads
        if encoder_hidden_states is None and sparse_params is None and rotary_emb is not None and \
                tuple(rotary_emb.shape) == (1, hidden_states.shape[1], 1, head_dim // 2, 2, 2):
            tables = (rotary_emb[0, :, 0, :, 0, 0], rotary_emb[0, :, 0, :, 1, 0])
        if tables is None:
            return self.stock(attn, hidden_states, encoder_hidden_states, rotary_emb, sparse_params)
        query, key, value = (projection(hidden_states).unflatten(2, (attn.num_heads, -1))
                             for projection in (attn.to_query, attn.to_key, attn.to_value))
        query = attn.query_norm(query.float()).type_as(query)
        key = attn.key_norm(key.float()).type_as(key)
        return attn.out_layer(self._attend(query, key, value, tables))


# ------------------------------------------------------------ steps and layer states

class _Generation:
    """The layer states of one generation, all at its current step (steps past
    num_inference_steps run past the grouping window, never an error)."""

    def __init__(self, num_inference_steps):
        self.num_inference_steps = int(num_inference_steps)
        self.step = 0
        self.layers = {}      # key -> [LayerState, step set in it, step it last grouped at]
        self.groupings = []   # (key, step, "cold"/"warm"): what grouped, for inspection and tests

    def layer(self, key):
        entry = self.layers.get(key)
        if entry is None:
            entry = self.layers[key] = [_core.LayerState(self.num_inference_steps), 0, None]
        if entry[1] != self.step:
            entry[0].step = min(self.step, self.num_inference_steps - 1)  # past the end: the last step's plan
            entry[1] = self.step
        return entry


class _Steps:
    """Turns the transformer calls of a pipeline (or of a bare transformer)
    into generations and denoising steps."""

    def __init__(self, scheduler_owner, num_inference_steps):
        self.owner, self.fixed = scheduler_owner, num_inference_steps
        self.generation, self.timesteps, self.last = None, None, None

    def _total(self):
        scheduler = getattr(self.owner, "scheduler", None)
        timesteps = getattr(scheduler, "timesteps", None)
        if timesteps is not None and len(timesteps):
            return timesteps, len(timesteps)
        return None, self.fixed

    def before_forward(self, timestep):
        timesteps, total = self._total()
        if timestep is None:
            sig = None
        elif isinstance(timestep, torch.Tensor):
            t = timestep.detach().float()
            sig = tuple(torch.stack([t.max(), t.min()]).tolist())  # per-token timesteps: their range
        else:
            sig = (float(timestep), float(timestep))
        new = self.generation is None
        if timesteps is not None:
            new = new or timesteps is not self.timesteps  # set_timesteps ran: a new generation
        elif sig is not None and self.last is not None and sig[0] > self.last[0]:
            new = True  # no scheduler: a higher timestep starts over
        if new:
            self.timesteps, self.last = timesteps, sig
            if total is None:
                self.generation = None
                _warn_once("no-steps", "vcattn: the step count is unknown (no pipeline scheduler with timesteps, no "
                                       "num_inference_steps): V-Smooth groups along the principal direction (no k-means grouping)")
            elif self.generation is None or self.generation.num_inference_steps != total:
                self.generation = _Generation(total)
            else:
                self.generation.step = 0
                self.generation.groupings = []
                for entry in self.generation.layers.values():
                    entry[2] = None
        elif sig is not None and sig != self.last:
            self.last = sig
            if self.generation is not None:
                self.generation.step += 1


class _Installation:
    """vcattn on one transformer: its processors' backend, and a forward that
    hands the timestep to the op that follows the steps."""

    def __init__(self, transformer, label, steps, method, fuse_rope):
        self.transformer, self.label, self.steps, self.method = transformer, label, steps, method
        self.saved, self.swapped, self.wrapper = [], [], None
        fused = _rope_processors() if fuse_rope else {}
        self.cfg = _core.config(method)
        member = _schedule_member()
        routed, skipped = 0, collections.Counter()
        for name, module in transformer.named_modules():
            processor = getattr(module, "processor", None)
            if processor is None or not callable(processor):
                continue
            has_backend = hasattr(processor, "_attention_backend")
            if not has_backend and type(processor) not in fused:  # calls torch SDPA itself: out of a backend's reach
                skipped[type(processor).__name__] += 1
                continue
            if has_backend:
                self.saved.append((processor, processor._attention_backend))
                processor._attention_backend = member  # what diffusers' set_attention_backend() sets
            if type(processor) in fused:
                module.processor = fused[type(processor)](processor)
                self.swapped.append((module, processor))
            routed += 1
        if not routed:
            self.remove()
            raise TypeError("vcattn: no attention of %s goes through diffusers' attention dispatcher (%s call torch "
                            "SDPA directly), so no attention backend can reach it"
                            % (type(transformer).__name__, ", ".join(sorted(skipped)) or "no processors"))
        if skipped:
            _warn_once(("skipped", type(transformer).__name__),
                       "vcattn: %s: %d attention modules (%s) call torch SDPA directly and stay on it"
                       % (type(transformer).__name__, sum(skipped.values()), ", ".join(sorted(skipped))))
        self.routed = routed
        params = list(inspect.signature(transformer.forward).parameters)
        self.timestep_at = params.index("timestep") if "timestep" in params else len(params)
        self.serial = next(_serials)
        _by_serial[self.serial] = self
        self._wrap_forward()

    def _wrap_forward(self):
        """The transformer's forward, first handing its timestep to the op that
        counts the steps when it runs. A wrapper, not a forward pre-hook:
        torch.compile(model) traces a hook as a graph of its own, the wrapper
        in the forward's graph. Traced, so it does nothing else (a Python
        number for a timestep becomes a constant of the graph: pass tensors)."""
        transformer, inner = self.transformer, self.transformer.forward
        self.own_forward = transformer.__dict__.get("forward")  # an instance-level forward set before ours
        serial, timestep_at = self.serial, self.timestep_at

        @functools.wraps(inner)
        def forward(*args, **kwargs):
            timestep = kwargs["timestep"] if "timestep" in kwargs else \
                (args[timestep_at] if timestep_at < len(args) else None)
            if timestep is not None and not isinstance(timestep, torch.Tensor):
                timestep = torch.tensor([float(timestep)])
            torch.ops.vcattn.dit_forward(_clock, timestep, serial)
            return inner(*args, **kwargs)
        transformer.forward = forward
        self.wrapper = forward

    def run(self, index, query, key, value, scale, rope, want_lse=True):
        """Run time: the index-th vcattn call of this forward, with its layer's state."""
        generation = self.steps.generation
        if generation is None:
            return _torch_op.run(query, key, value, "NHD", scale, self.method, {}, None, False, rope, want_lse)
        layer_key = (self.label, index, tuple(key.shape))
        state, step, grouped_at = generation.layer(layer_key)
        plan = _core.lib().vcattn_layer_plan(state.c_layer(), ctypes.byref(self.cfg))
        groups = plan in (1, 2)  # VCATTN_GROUP_COLD, VCATTN_GROUP_WARM
        again = groups and grouped_at == step  # another pass of this step: reuse what it grouped
        if again:
            stats["vcattn:reuse"] += 1
        out = _torch_op.run(query, key, value, "NHD", scale, self.method, _REUSE_GROUPING if again else {},
                            state.c_layer(), False, rope, want_lse)
        if groups and not again:
            generation.layers[layer_key][2] = step
            generation.groupings.append((layer_key, step, "cold" if plan == 1 else "warm"))
        return out

    def remove(self):
        _by_serial.pop(getattr(self, "serial", None), None)  # a wrapper left in place counts nothing
        current = getattr(_local, "forward", None)
        if current is not None and current[0] is self:  # this thread's last forward was ours: calls after it
            _local.forward = None                        # are no layers of it
        if getattr(self, "wrapper", None) is not None and self.transformer.__dict__.get("forward") is self.wrapper:
            if self.own_forward is None:
                del self.transformer.forward
            else:
                self.transformer.forward = self.own_forward
        self.wrapper = None
        for module, processor in self.swapped:
            module.processor = processor
        for processor, backend in self.saved:
            processor._attention_backend = backend
        self.saved, self.swapped = [], []


class Handle:
    """What enable()/set_backend() return: the step, the generation's layer
    states and what grouped so far."""

    def __init__(self, steps, installations):
        self._steps, self.installations = steps, installations

    @property
    def step(self):
        g = self._steps.generation
        return g.step if g is not None else 0

    @property
    def num_inference_steps(self):
        g = self._steps.generation
        return g.num_inference_steps if g is not None else self._steps.fixed

    @property
    def groupings(self):
        """(layer key, step, "cold"/"warm") of each grouping in this generation."""
        g = self._steps.generation
        return list(g.groupings) if g is not None else []

    def layers(self):
        """layer key -> LayerState of this generation."""
        g = self._steps.generation
        return {k: e[0] for k, e in g.layers.items()} if g is not None else {}


def _transformers(obj):
    if isinstance(obj, torch.nn.Module):
        return [("transformer", obj)]
    components = getattr(obj, "components", None)
    found = [(n, m) for n, m in (components or {}).items()
             if n.startswith("transformer") and isinstance(m, torch.nn.Module)]
    if not found:
        raise TypeError("vcattn: expected a diffusers pipeline with a transformer, or a transformer module; got %s"
                        % type(obj).__name__)
    return found


def set_backend(pipe_or_transformer, method="vc", num_inference_steps=None, fuse_rope=True):
    """Routes every attention of the transformer(s) that goes through diffusers'
    dispatcher to vcattn, with a per-module LayerState and the step schedule.
    A pipeline tells the step count (its scheduler); a bare transformer needs
    num_inference_steps for the grouping schedule. fuse_rope: the
    self-attention of Wan (and the Wan-like models), HunyuanVideo(-1.5),
    Kandinsky 5, Flux and Flux.2 hands q and k to vcattn before RoPE, with
    its tables, and the quantizers rotate them (WanRopeProcessor,
    HunyuanVideoRopeProcessor, HunyuanVideo15Processor,
    Kandinsky5RopeProcessor, FluxRopeProcessor, Flux2ParallelRopeProcessor).
    Returns a Handle."""
    _core.config(method)  # unknown methods fail here, not mid-generation
    targets = _transformers(pipe_or_transformer)
    pipeline = None if isinstance(pipe_or_transformer, torch.nn.Module) else pipe_or_transformer
    if pipeline is not None and num_inference_steps is not None:
        warnings.warn("vcattn: num_inference_steps is ignored for a pipeline: its scheduler tells the step count",
                      stacklevel=2)
        num_inference_steps = None
    if num_inference_steps is not None and int(num_inference_steps) < 1:
        raise ValueError("vcattn: num_inference_steps must be >= 1, got %r" % (num_inference_steps,))
    for _, transformer in targets:
        if id(transformer) in _installed:
            raise RuntimeError("vcattn: already enabled on this transformer; call disable() first")
    steps = _Steps(pipeline, num_inference_steps)  # one step count for all (Wan2.2-A14B's two experts)
    installations = []
    try:
        for label, transformer in targets:
            installations.append(_Installation(transformer, label, steps, method, fuse_rope))
            _installed[id(transformer)] = installations[-1]
    except Exception:
        for inst in installations:
            inst.remove()
            _installed.pop(id(inst.transformer), None)
        raise
    return Handle(steps, installations)


def enable(pipe, method="vc", num_inference_steps=None, fuse_rope=True):
    """vcattn on every transformer of a pipeline (or on one transformer)."""
    return set_backend(pipe, method=method, num_inference_steps=num_inference_steps, fuse_rope=fuse_rope)


def disable(pipe_or_transformer):
    """The processors' previous backends back, the hooks removed."""
    for _, transformer in _transformers(pipe_or_transformer):
        inst = _installed.pop(id(transformer), None)
        if inst is not None:
            inst.remove()


register()
