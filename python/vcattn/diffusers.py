"""vcattn in diffusers video transformers, in three lines:

    import vcattn.diffusers
    vcattn.diffusers.enable(pipe, num_inference_steps=40)   # every Wan self-attention
    video = pipe(prompt, num_inference_steps=40).frames[0]
    vcattn.diffusers.disable(pipe)                           # the original processors back

Self-attention (`attn1` of every block) goes through vcattn; cross-attention to
the text (and image) tokens stays on diffusers' own dispatcher (SDPA). The
denoising step follows the `timestep` the transformer receives: a new value
is a new step (the classifier-free-guidance passes of one step share it), a
value above the previous one starts a new generation. One session serves all
the transformers given (Wan2.2-A14B's two experts share the step count).

How it routes: the Wan attention processor calls the module-level
`dispatch_attention_fn` of `diffusers.models.transformers.transformer_wan`;
while enabled, that name points at a router that sends the calls made by a
vcattn-enabled self-attention processor to `attention_backend` and every
other call to the original dispatcher.
"""
import threading

import torch

import vcattn

from . import Session

_routing = threading.local()   # the vcattn processor currently running, if any
_original_dispatch = None
_enabled = {}                   # id(transformer) -> _Installation


def attention_backend(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                      enable_gqa=False, return_lse=False, _parallel_config=None, *, state=None,
                      method="vc"):
    """diffusers' attention-dispatcher signature, [B, S, H, D] tensors. Masks,
    dropout and causal attention are refused with a clear error (never
    silently ignored); GQA is native (Hq a multiple of Hkv)."""
    if attn_mask is not None:
        raise ValueError("vcattn: attention masks are not supported (attn_mask must be None); run masked "
                         "attention on SDPA")
    if dropout_p:
        raise ValueError("vcattn: dropout is not supported (dropout_p must be 0)")
    if _parallel_config is not None:
        raise ValueError("vcattn: diffusers context parallelism is not routed through vcattn; use the xDiT "
                         "backend (vcattn.xdit) for sequence parallel runs")
    return vcattn.attention(query, key, value, tensor_layout="NHD", is_causal=is_causal, sm_scale=scale,
                            return_lse=return_lse, method=method, state=state, check_finite=False)


def _router(query, key, value, *args, **kwargs):
    target = getattr(_routing, "processor", None)
    if target is None:
        return _original_dispatch(query, key, value, *args, **kwargs)
    _routing.processor = None  # one call per processor call (I2V's image attention is not self-attention)
    names = ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    options = dict(zip(names, args))
    options.update({k: kwargs[k] for k in names if k in kwargs})
    return attention_backend(query, key, value, **options, state=target.state, method=target.method)


class VcattnProcessor:
    """Wraps a self-attention processor: its own projections, norms and RoPE,
    with the attention itself routed to vcattn."""

    def __init__(self, inner, state, method):
        self.inner, self.state, self.method = inner, state, method

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary_emb=None):
        if encoder_hidden_states is not None or attention_mask is not None:
            return self.inner(attn, hidden_states, encoder_hidden_states, attention_mask, rotary_emb)
        _routing.processor = self
        try:
            return self.inner(attn, hidden_states, None, None, rotary_emb)
        finally:
            _routing.processor = None

    def __getattr__(self, name):  # _attention_backend, _parallel_config, ... of the inner processor
        return getattr(self.inner, name)


class _StepTracker:
    """Turns the timesteps a transformer sees into denoising steps."""

    def __init__(self, session):
        self.session, self.last = session, None

    def __call__(self, module, args, kwargs):
        t = kwargs.get("timestep", args[1] if len(args) > 1 else None)
        if t is None:
            return
        value = float(t.flatten()[0]) if isinstance(t, torch.Tensor) else float(t)
        if self.last is None or value > self.last:      # a new generation
            self.session.step = 0
        elif value < self.last:                          # the next step
            if self.session.step + 1 >= self.session.num_inference_steps:
                raise ValueError("vcattn: more denoising steps than num_inference_steps=%d given to "
                                 "vcattn.diffusers.enable()" % self.session.num_inference_steps)
            self.session.next_step()
        self.last = value


class _Installation:
    def __init__(self, transformer, processors, hook):
        self.transformer, self.processors, self.hook = transformer, processors, hook


def _transformers(obj):
    if isinstance(obj, torch.nn.Module):
        return [obj]
    found = [getattr(obj, n) for n in ("transformer", "transformer_2") if getattr(obj, n, None) is not None]
    if not found:
        raise TypeError("vcattn: expected a diffusers pipeline with .transformer or a transformer module, got %s"
                        % type(obj).__name__)
    return found


def _self_attentions(transformer):
    blocks = getattr(transformer, "blocks", None)
    if blocks is None or not all(hasattr(b, "attn1") for b in blocks):
        raise TypeError("vcattn: %s is not a supported video transformer (WanTransformer3DModel: blocks with "
                        "attn1 self-attention)" % type(transformer).__name__)
    return [(i, b.attn1) for i, b in enumerate(blocks)]


def enable(pipe_or_transformer, num_inference_steps, method="vc"):
    """Installs vcattn on every self-attention; returns the Session (its .step is the current step)."""
    global _original_dispatch
    from diffusers.models.transformers import transformer_wan
    vcattn.config(method)  # unknown methods fail here, not mid-generation
    session = Session(num_inference_steps)
    tracker = _StepTracker(session)
    for transformer in _transformers(pipe_or_transformer):
        if id(transformer) in _enabled:
            raise RuntimeError("vcattn: already enabled on this transformer; call disable() first")
        processors = {}
        for i, attn in _self_attentions(transformer):
            processors[i] = attn.processor
            attn.set_processor(VcattnProcessor(attn.processor, session.layer((id(transformer), i)), method))
        hook = transformer.register_forward_pre_hook(tracker, with_kwargs=True)
        _enabled[id(transformer)] = _Installation(transformer, processors, hook)
    if _original_dispatch is None:
        _original_dispatch = transformer_wan.dispatch_attention_fn
        transformer_wan.dispatch_attention_fn = _router
    return session


def disable(pipe_or_transformer):
    """Restores the original processors (and, when nothing uses vcattn any
    more, diffusers' dispatcher)."""
    global _original_dispatch
    from diffusers.models.transformers import transformer_wan
    for transformer in _transformers(pipe_or_transformer):
        inst = _enabled.pop(id(transformer), None)
        if inst is None:
            continue
        blocks = transformer.blocks
        for i, processor in inst.processors.items():
            blocks[i].attn1.set_processor(processor)
        inst.hook.remove()
    if not _enabled and _original_dispatch is not None:
        transformer_wan.dispatch_attention_fn = _original_dispatch
        _original_dispatch = None
