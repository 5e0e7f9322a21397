"""vcattn in ComfyUI.

ComfyUI's models call one attention function with its own signature,
`(q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False,
skip_output_reshape=False, **kwargs)`, and recent ComfyUI lets a model's
`transformer_options["optimized_attention_override"]` take every such call
(what the known "patch attention" nodes use). This module gives:

- `attention`: that signature, computed by vcattn where it can run the
  call (vcattn.sdpa's rule: no mask, a head dim vcattn takes, ...) and by
  torch SDPA otherwise;
- `override`: the form `optimized_attention_override` takes (it receives
  ComfyUI's own function first, and keeps the call's layout arguments);
- `patch(model)`: a clone of a ComfyUI ModelPatcher whose calls go through
  `override`; and `NODE_CLASS_MAPPINGS`, a node "vcattn: patch attention"
  that does this in a workflow. To install the node, put one file in
  ComfyUI's `custom_nodes/` folder:
  `from vcattn.comfyui import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS`.

Each call is the drop-in call (V-Smooth's blocks in the principal order, no
layer state): ComfyUI hands the attention function neither the layer nor
the step in a form every model shares."""
import functools
from typing import Any, Callable, Optional

import torch

from . import _core
from ._sdpa import sdpa


def _to_bhnd(t: torch.Tensor, heads: int, skip_reshape: bool) -> torch.Tensor:
    """ComfyUI's operand as [B, H, N, D]: [B, H, N, D] already when
    skip_reshape, else [B, N, H * D]."""
    if skip_reshape:
        return t
    b, n, hd = t.shape
    if hd % heads:
        raise ValueError("vcattn.comfyui: the last dim %d is not a multiple of heads = %d" % (hd, heads))
    return t.view(b, n, heads, hd // heads).transpose(1, 2)


def _sdpa_mask(mask: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """ComfyUI's mask ([Nq, Nk], [B, Nq, Nk] or [B, H, Nq, Nk]) as SDPA broadcasts it."""
    if mask is None:
        return None
    if mask.ndim == 2:
        mask = mask.unsqueeze(0)
    if mask.ndim == 3:
        mask = mask.unsqueeze(1)
    return mask


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, mask: Optional[torch.Tensor] = None,
              attn_precision: Any = None, skip_reshape: bool = False, skip_output_reshape: bool = False,
              method: str = "vc", **kwargs: Any) -> torch.Tensor:
    """ComfyUI's attention-function signature: q, k, v as [B, N, H * D]
    (or [B, H, N, D] with skip_reshape); returns [B, N, H * D] (or
    [B, H, N, D] with skip_output_reshape). attn_precision and ComfyUI's
    other keywords (transformer_options, ...) are accepted: vcattn's
    precision is its method's."""
    qh, kh, vh = (_to_bhnd(t, heads, skip_reshape) for t in (q, k, v))
    out = sdpa(qh, kh, vh, attn_mask=_sdpa_mask(mask), enable_gqa=qh.shape[1] != kh.shape[1], method=method)
    if skip_output_reshape:
        return out
    b, h, n, d = out.shape
    return out.transpose(1, 2).reshape(b, n, h * d)


def override(func: Callable[..., Any], *args: Any, method: str = "vc", **kwargs: Any) -> torch.Tensor:
    """For transformer_options["optimized_attention_override"]: ComfyUI
    passes the function it would have called, then that call's arguments."""
    kwargs.pop("_inside_attn_wrapper", None)  # ComfyUI's re-entry marker, not an argument
    kwargs["method"] = method
    return attention(*args, **kwargs)


def patch(model: Any, method: str = "vc") -> Any:
    """A clone of the ComfyUI ModelPatcher model whose attention calls run
    through vcattn with `method` (the original is left as it was)."""
    _core.config(method)  # an unknown method fails here, not at the first step
    patched = model.clone()
    options = patched.model_options.setdefault("transformer_options", {})
    options["optimized_attention_override"] = functools.partial(override, method=method)
    return patched


class PatchAttention:
    """The ComfyUI node: MODEL in, the same model with vcattn's attention out."""
    CATEGORY = "advanced/attention"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "apply"
    DESCRIPTION = ("Runs the model's attention through vcattn (INT8 QK, FP8 PV with V-Smooth); masked calls and "
                   "head dims vcattn lacks go to PyTorch SDPA.")

    METHODS = ["vc", "vc+probe", "vsmooth", "sage2", "sage2+hadamard"]  # the 8-bit methods the GPU kernel runs

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {"required": {"model": ("MODEL",), "method": (cls.METHODS, {"default": "vc"})}}

    def apply(self, model: Any, method: str = "vc") -> tuple[Any]:
        return (patch(model, method),)


NODE_CLASS_MAPPINGS = {"VcattnPatchAttention": PatchAttention}
NODE_DISPLAY_NAME_MAPPINGS = {"VcattnPatchAttention": "vcattn: patch attention"}
