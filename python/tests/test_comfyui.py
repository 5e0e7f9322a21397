"""vcattn.comfyui: ComfyUI's attention-function signature and the model
patch, on the CPU (or the GPU with VCATTN_TEST_DEVICE=cuda). ComfyUI itself
is not a package: with VCATTN_COMFYUI naming a ComfyUI checkout (and its
einops and psutil installed), its own attention module and tiny random Wan
and HunyuanVideo models built from its own model code are driven through the
patch too; without it that part says it is not run. Exits 77 without torch."""
import functools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, finish, raises, skip, test_device  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    skip("test_comfyui", "torch is not installed")

import vcattn  # noqa: E402
from vcattn import comfyui  # noqa: E402

device = test_device("test_comfyui")
dtype = torch.bfloat16 if device == "cuda" else torch.float32
torch.manual_seed(0)
B, H, N, NK, D = 2, 4, 300, 200, 64
q = torch.randn(B, N, H * D, device=device, dtype=dtype)
k = torch.randn(B, NK, H * D, device=device, dtype=dtype) + 0.5
v = torch.randn(B, NK, H * D, device=device, dtype=dtype)


def heads_first(t):
    return t.view(t.shape[0], t.shape[1], H, D).transpose(1, 2)


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


with torch.no_grad():
    # ComfyUI's default layout [B, N, H * D] in and out: vcattn's drop-in call, bit for bit
    out = comfyui.attention(q, k, v, H)
    want = vcattn.attention(heads_first(q), heads_first(k), heads_first(v))
    check(out.shape == (B, N, H * D), "[B, N, H*D] out: shape %s" % (tuple(out.shape),))
    check(torch.equal(out, want.transpose(1, 2).reshape(B, N, H * D)), "[B, N, H*D]: not vcattn.attention's result")
    sdpa = F.scaled_dot_product_attention(heads_first(q), heads_first(k), heads_first(v))
    err = rel(out, sdpa.transpose(1, 2).reshape(B, N, H * D))
    check(err < 0.05, "vcattn against SDPA: relative error %.3g" % err)

    # skip_reshape: [B, H, N, D] in; skip_output_reshape: [B, H, N, D] out
    out_h = comfyui.attention(heads_first(q), heads_first(k), heads_first(v), H, skip_reshape=True,
                              skip_output_reshape=True)
    check(torch.equal(out_h, want), "[B, H, N, D] in and out: not vcattn.attention's result")
    out_mixed = comfyui.attention(heads_first(q), heads_first(k), heads_first(v), H, skip_reshape=True)
    check(torch.equal(out_mixed, out), "[B, H, N, D] in, [B, N, H*D] out")

    # ComfyUI's keywords are accepted; attn_precision changes nothing
    out_kw = comfyui.attention(q, k, v, heads=H, attn_precision=torch.float32,
                               transformer_options={"block_index": 3}, low_precision_attention=True)
    check(torch.equal(out_kw, out), "ComfyUI keywords changed the result")

    # masks, as ComfyUI passes them ([Nq, Nk], [B, Nq, Nk], [B, H, Nq, Nk]): torch SDPA's exact result
    keep = torch.rand(N, NK, device=device) > 0.3
    for label, mask in (("2-D bool", keep), ("3-D bool", keep.expand(B, N, NK)),
                        ("4-D additive", torch.where(keep, 0.0, -1e4).to(dtype).expand(B, H, N, NK))):
        routes = dict(vcattn.sdpa_routes)
        got = comfyui.attention(q, k, v, H, mask=mask)
        m4 = mask if mask.ndim == 4 else (mask.unsqueeze(0) if mask.ndim == 2 else mask).unsqueeze(1)
        ref = F.scaled_dot_product_attention(heads_first(q), heads_first(k), heads_first(v), attn_mask=m4)
        check(torch.equal(got, ref.transpose(1, 2).reshape(B, N, H * D)), "%s mask: not torch SDPA's result" % label)
        check(vcattn.sdpa_routes["sdpa:mask"] == routes.get("sdpa:mask", 0) + 1, "%s mask: route not counted" % label)

    # GQA in [B, H, N, D]
    kg, vg = heads_first(k)[:, :2], heads_first(v)[:, :2]
    got = comfyui.attention(heads_first(q), kg, vg, H, skip_reshape=True, skip_output_reshape=True)
    check(torch.equal(got, vcattn.attention(heads_first(q), kg, vg)), "GQA: not vcattn.attention's result")

    raises(ValueError, lambda: comfyui.attention(q, k, v, 3), "not a multiple of heads", "heads not dividing H*D")

    # the override form: ComfyUI's function first, its re-entry marker dropped
    def comfy_default(*args, **kwargs):
        raise AssertionError("the override called ComfyUI's own function")
    got = comfyui.override(comfy_default, q, k, v, H, mask=None, transformer_options={}, _inside_attn_wrapper=True)
    check(torch.equal(got, out), "override: not the attention function's result")

    # patch(): a clone carries the override; the original model is untouched
    class FakePatcher:
        def __init__(self, options):
            self.model_options = options

        def clone(self):
            return FakePatcher({key: dict(val) if isinstance(val, dict) else val
                                for key, val in self.model_options.items()})

    def carries_override(model, method):
        fn = model.model_options["transformer_options"].get("optimized_attention_override")
        return isinstance(fn, functools.partial) and fn.func is comfyui.override and fn.keywords == {"method": method}

    original = FakePatcher({"transformer_options": {"keep": 1}})
    patched = comfyui.patch(original)
    check(carries_override(patched, "vc"), "patch: no override (method vc) in the clone")
    check(patched.model_options["transformer_options"].get("keep") == 1, "patch: lost the clone's other options")
    check("optimized_attention_override" not in original.model_options["transformer_options"],
          "patch: changed the original model")
    node = comfyui.NODE_CLASS_MAPPINGS["VcattnPatchAttention"]()
    (from_node,) = getattr(node, node.FUNCTION)(original)
    check(carries_override(from_node, "vc"), "node: its model does not carry the override (method vc)")
    check(set(comfyui.NODE_DISPLAY_NAME_MAPPINGS) == set(comfyui.NODE_CLASS_MAPPINGS), "node: display names")
    # another method: the override carries it; every method the node offers is one vcattn knows
    (sage,) = node.apply(original, "sage2")
    got = sage.model_options["transformer_options"]["optimized_attention_override"](comfy_default, q, k, v, H)
    check(torch.equal(got, vcattn.attention(heads_first(q), heads_first(k), heads_first(v), method="sage2")
                      .transpose(1, 2).reshape(B, N, H * D)), "node with sage2: not vcattn's sage2 result")
    methods = node.INPUT_TYPES()["required"]["method"][0]
    check(all(comfyui.patch(original, m) is not None for m in methods), "node: a method it offers is refused")
    raises(ValueError, lambda: comfyui.patch(original, "nope"), "unknown method", "patch: unknown method")

    # ComfyUI itself, when a checkout is named: its attention module, and tiny
    # random Wan and HunyuanVideo models built from its own code, through the patch
    root = os.environ.get("VCATTN_COMFYUI")
    if root:
        sys.path.insert(0, root)
        sys.argv = sys.argv[:1] + (["--cpu"] if device == "cpu" else [])
        import comfy.options
        comfy.options.enable_args_parsing()  # ComfyUI reads its flags (--cpu) only when asked to
        from comfy.ldm.modules import attention as comfy_attention
        options = {"optimized_attention_override": comfyui.override}
        got = comfy_attention.optimized_attention(q, k, v, H, transformer_options=options)
        check(torch.equal(got, out), "ComfyUI's optimized_attention with the override: not vcattn's result")
        plain = comfy_attention.optimized_attention(q, k, v, H)
        err = rel(got, plain)
        check(err < 0.05, "ComfyUI's own attention against vcattn's: relative difference %.3g" % err)

        import comfy.ops
        from comfy.ldm.wan.model import WanModel
        before = vcattn.set_sdpa_below_keys(0)  # tiny sequences: vcattn itself, not the length rule's SDPA
        torch.manual_seed(1)
        wan = WanModel(model_type="t2v", patch_size=(1, 2, 2), text_len=32, in_dim=16, dim=256, ffn_dim=512,
                       freq_dim=64, text_dim=64, out_dim=16, num_heads=2, num_layers=2,
                       operations=comfy.ops.manual_cast, device=device, dtype=dtype)
        for p in wan.parameters():
            torch.nn.init.normal_(p, std=0.05)
        latent = torch.randn(1, 16, 3, 24, 32, device=device, dtype=dtype)  # 3 x 12 x 16 = 576 tokens
        timestep = torch.tensor([500.0], device=device)
        context = torch.randn(1, 32, 64, device=device, dtype=dtype)
        patched = comfyui.patch(FakePatcher({"transformer_options": {}}))
        patched_options = patched.model_options["transformer_options"]

        def through_vcattn(label, model, calls, *inputs, **kw):
            stock = model(*inputs, **kw)
            ran = vcattn.sdpa_routes["vcattn"]
            got = model(*inputs, transformer_options=patched_options, **kw)
            ran = vcattn.sdpa_routes["vcattn"] - ran
            check(ran == calls, "ComfyUI's %s: %d attention calls ran on vcattn, not %d" % (label, ran, calls))
            err = rel(got, stock)
            print("test_comfyui: ComfyUI's %s: vcattn against its default attention, relative difference %.3g"
                  % (label, err))
            check(err < 0.05, "ComfyUI's %s with vcattn against its default attention: relative difference %.3g"
                  % (label, err))

        # self and cross attention in each of two blocks ([B, N, H*D] calls)
        through_vcattn("Wan (2 blocks, 576 tokens)", wan, 4, latent, timestep, context)

        from comfy.ldm.hunyuan_video.model import HunyuanVideo
        hunyuan = HunyuanVideo(in_channels=16, out_channels=16, vec_in_dim=32, context_in_dim=64, hidden_size=256,
                               mlp_ratio=2.0, num_heads=2, depth=1, depth_single_blocks=1, axes_dim=[16, 56, 56],
                               theta=256, patch_size=[1, 2, 2], qkv_bias=True, guidance_embed=False, byt5=False,
                               meanflow=False, operations=comfy.ops.manual_cast, device=device, dtype=dtype)
        for p in hunyuan.parameters():
            torch.nn.init.normal_(p, std=0.05)
        # the text refiner's two blocks, then joint attention ([B, H, N, D] calls) in a double and a single block
        through_vcattn("HunyuanVideo (1 + 1 blocks, 596 tokens)", hunyuan, 4, latent, timestep, context[:, :20],
                       y=torch.randn(1, 32, device=device, dtype=dtype))
        vcattn.set_sdpa_below_keys(before)
    else:
        print("test_comfyui: ComfyUI itself not driven (VCATTN_COMFYUI names no checkout)")

finish("test_comfyui")
