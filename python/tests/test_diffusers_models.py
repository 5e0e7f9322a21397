"""vcattn.diffusers on a tiny random transformer of each video (and one image)
model diffusers has: the vcattn op is really called, the output stays close to
diffusers' SDPA backend on the same weights and inputs, disable() gives the
SDPA output back exactly, and models whose processors bypass the dispatcher
are refused with the reason. CPU backend, or the GPU with
VCATTN_TEST_DEVICE=cuda (exits 77 when torch or diffusers is missing)."""
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, finish, skip, test_device  # noqa: E402

try:
    import torch
    import diffusers
except ImportError as e:
    skip("test_diffusers_models", "needs torch and diffusers (%s)" % e)

import vcattn.diffusers as vd  # noqa: E402

device = test_device("test_diffusers_models")
warnings.simplefilter("ignore")  # the fallbacks' one-time warnings are checked in test_diffusers
def rand_init(model):
    # diffusers zero-initialises some output projections; random weights everywhere
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    return model.eval()


def run(name, model, inputs, min_calls, fallback=None):
    torch.manual_seed(1)
    rand_init(model)
    model = model.to(device)
    inputs = {key: x.to(device) if torch.is_tensor(x) else x for key, x in inputs.items()}
    with torch.no_grad():
        ref = model(**inputs, return_dict=False)[0]
        n0 = vd.stats["vcattn"]  # the ops count the calls that reach the kernel
        handle = vd.set_backend(model, num_inference_steps=4)
        out = model(**inputs, return_dict=False)[0]
        routed = vd.stats["vcattn"] - n0
        vd.disable(model)
        again = model(**inputs, return_dict=False)[0]
    rel = ((out - ref).norm() / ref.norm()).item()
    if fallback:  # every self-attention carries a mask V-Smooth cannot follow: all of it on SDPA
        check(routed == 0 and torch.equal(out, ref), "%s: %d vcattn calls, expected SDPA only" % (name, routed))
        check(vd.stats["sdpa:" + fallback] > 0, "%s: no SDPA fallback counted for %s" % (name, fallback))
        print("%s: SDPA fallback (%s), output identical" % (name, fallback))
        return
    check(routed >= min_calls, "%s: %d vcattn calls, expected at least %d" % (name, routed, min_calls))
    check(0 < rel < 0.08, "%s: output vs SDPA relative difference %.4f" % (name, rel))
    check(len(handle.layers()) >= 1, "%s: no layer state created" % name)
    check(torch.equal(again, ref), "%s: disable() did not restore the SDPA output" % name)
    print("%s: %d vcattn calls, %d layer states, relative difference to SDPA %.4f"
          % (name, routed, len(handle.layers()), rel))


def check_fused_rope(name, model, inputs, processor_class, modules, calls=None, stock_rounds=False):
    """set_backend's default puts the self-attention's RoPE inside the
    quantizers (processor_class on `modules` attention modules, `calls` of
    them with RoPE tables, all by default): the result
    of rotating q and k in PyTorch first (fuse_rope=False), bit for bit on
    the CPU, within BF16 rounding on the GPU. stock_rounds: the stock
    processor rounds the rotated q and k to BF16 (on the CPU too), so there
    the two differ by that rounding."""
    inputs = {key: x.to(device) if torch.is_tensor(x) else x for key, x in inputs.items()}
    with torch.no_grad():
        vd.set_backend(model, num_inference_steps=4)
        swapped = [x for x in model.modules() if isinstance(getattr(x, "processor", None), processor_class)]
        r0 = vd.stats["vcattn:rope"]
        fused = model(**inputs, return_dict=False)[0]
        rope_calls = vd.stats["vcattn:rope"] - r0
        vd.disable(model)
        vd.set_backend(model, num_inference_steps=4, fuse_rope=False)
        unfused = model(**inputs, return_dict=False)[0]
        vd.disable(model)
    check(len(swapped) == modules, "%s: fused-RoPE processors on %d modules, want %d" % (name, len(swapped), modules))
    calls = modules if calls is None else calls
    check(rope_calls == calls, "%s: %d calls with RoPE tables, want %d" % (name, rope_calls, calls))
    diff = ((fused - unfused).norm() / unfused.norm()).item()
    if device == "cpu" and not stock_rounds:
        check(torch.equal(fused, unfused), "%s: fused RoPE differs from RoPE in PyTorch: %.2e" % (name, diff))
    else:
        check(0 < diff < 1e-2 if stock_rounds else diff < 1e-2,
              "%s: fused RoPE vs RoPE in PyTorch: relative difference %.2e" % (name, diff))
    print("%s: RoPE fused in %d calls, relative difference to RoPE in PyTorch %.1e" % (name, rope_calls, diff))


torch.manual_seed(0)
text_mask = torch.tensor([[1, 1, 1, 1, 0, 0]])  # two padding tokens: a key-padding mask in joint attention

if hasattr(diffusers, "HunyuanVideoTransformer3DModel"):
    m = diffusers.HunyuanVideoTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=32, num_layers=1,
        num_single_layers=1, num_refiner_layers=1, patch_size=1, text_embed_dim=16, pooled_projection_dim=8,
        rope_axes_dim=(8, 12, 12))
    inputs = dict(hidden_states=torch.randn(1, 4, 2, 8, 8), timestep=torch.tensor([900]),
                  encoder_hidden_states=torch.randn(1, 6, 16), encoder_attention_mask=text_mask,
                  pooled_projections=torch.randn(1, 8), guidance=torch.tensor([3000.0]))
    run("HunyuanVideo", m, inputs, 2)
    # the video tokens' RoPE, in the dual- and the single-stream block, the text
    # tokens unrotated and padded
    check_fused_rope("HunyuanVideo", m, inputs, vd.HunyuanVideoRopeProcessor, 2)

# HunyuanVideo-1.5 masks its joint attention with padding[:, None] & padding[None, :]
# ([B, 1, N, N], queries too). Its processor under set_backend runs that as the
# key-padding mask with the padded rows zeroed (as SDPA leaves them); the stock
# processor's [B, 1, N, N] mask, which the "vcattn" backend alone sees, stays on SDPA.
if hasattr(diffusers, "HunyuanVideo15Transformer3DModel"):
    m = diffusers.HunyuanVideo15Transformer3DModel(
        in_channels=9, out_channels=4, num_attention_heads=2, attention_head_dim=32, num_layers=2,
        num_refiner_layers=1, patch_size=1, text_embed_dim=16, text_embed_2_dim=8, image_embed_dim=8,
        rope_axes_dim=(8, 12, 12), task_type="t2v")
    inputs = dict(hidden_states=torch.randn(1, 9, 2, 8, 8), timestep=torch.tensor([900.0]),
                  encoder_hidden_states=torch.randn(1, 6, 16), encoder_attention_mask=text_mask,
                  encoder_hidden_states_2=torch.randn(1, 5, 8), encoder_attention_mask_2=torch.ones(1, 5),
                  image_embeds=torch.zeros(1, 4, 8))
    run("HunyuanVideo-1.5", m, inputs, 2)
    swapped = [x for x in m.modules() if isinstance(getattr(x, "processor", None), vd.HunyuanVideo15Processor)]
    check(len(swapped) == 0, "HunyuanVideo-1.5: disable() left %d processors" % len(swapped))
    from diffusers.models.attention_dispatch import _AttentionBackendRegistry
    default_backend = _AttentionBackendRegistry.get_active_backend()[0]
    with torch.no_grad():  # the drop-in backend alone: the stock processor's general mask goes to SDPA
        m.set_attention_backend("vcattn")
        s0 = vd.stats["sdpa:mask"]
        m(**{key: x.to(device) for key, x in inputs.items()}, return_dict=False)
        m.reset_attention_backend()
    # set_attention_backend also made "vcattn" the process-wide default, which reset_attention_backend
    # leaves: the models below would take it for their SDPA reference
    _AttentionBackendRegistry.set_active_backend(default_backend)
    check(vd.stats["sdpa:mask"] - s0 == 2, "HunyuanVideo-1.5 on the drop-in backend: %d SDPA mask routes, want 2"
          % (vd.stats["sdpa:mask"] - s0))

if hasattr(diffusers, "LTXVideoTransformer3DModel"):
    m = diffusers.LTXVideoTransformer3DModel(
        in_channels=8, out_channels=8, num_attention_heads=2, attention_head_dim=32, cross_attention_dim=64,
        num_layers=2, caption_channels=16)
    inputs = dict(hidden_states=torch.randn(1, 2 * 8 * 8, 8), encoder_hidden_states=torch.randn(1, 6, 16),
                  timestep=torch.tensor([900]), encoder_attention_mask=text_mask, num_frames=2, height=8, width=8)
    run("LTX-Video", m, inputs, 2)
    # the self-attention's RoPE fused with per-head tables (LTX-Video's frequencies span
    # the inner dimension); cross-attention swapped too, on the stock path
    check_fused_rope("LTX-Video", m, inputs, vd.LTXVideoRopeProcessor, 4, calls=2)

# LTX-2 (video and audio): the self-attention's RoPE fused in both of its forms,
# "interleaved" tables over the inner dimension and "split" per-head tables (pairs
# (i, i + D/2)); the audio-video cross-attention and the text cross-attention stay stock
if hasattr(diffusers, "LTX2VideoTransformer3DModel"):
    for rope_type in ("interleaved", "split"):
        m = diffusers.LTX2VideoTransformer3DModel(
            in_channels=4, out_channels=4, patch_size=1, patch_size_t=1, num_attention_heads=2, attention_head_dim=32,
            cross_attention_dim=64, audio_in_channels=4, audio_out_channels=4, audio_num_attention_heads=2,
            audio_attention_head_dim=16, audio_cross_attention_dim=32, num_layers=2, caption_channels=16,
            rope_double_precision=False, rope_type=rope_type)
        inputs = dict(hidden_states=torch.randn(1, 2 * 8 * 8, 4), audio_hidden_states=torch.randn(1, 9, 4),
                      encoder_hidden_states=torch.randn(1, 6, 16), audio_encoder_hidden_states=torch.randn(1, 6, 16),
                      timestep=torch.tensor([900.0]), encoder_attention_mask=torch.ones(1, 6, dtype=torch.bool),
                      num_frames=2, height=8, width=8, audio_num_frames=9, fps=25.0)
        run("LTX-2 (%s RoPE)" % rope_type, m, inputs, 4)
        check_fused_rope("LTX-2 (%s RoPE)" % rope_type, m, inputs, vd.LTX2RopeProcessor, 12, calls=4)

# SkyReels-V2 (Wan's processor under another name) and ChronoEdit (Wan's processor
# copied into its own module): self- and cross-attention swapped, the
# self-attention's RoPE fused
for name, cls in (("SkyReels-V2", "SkyReelsV2Transformer3DModel"), ("ChronoEdit", "ChronoEditTransformer3DModel")):
    if not hasattr(diffusers, cls):
        continue
    m = getattr(diffusers, cls)(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=32, in_channels=4, out_channels=4,
        text_dim=16, freq_dim=32, ffn_dim=64, num_layers=2, rope_max_seq_len=32)
    inputs = dict(hidden_states=torch.randn(1, 4, 2, 16, 16), timestep=torch.tensor([900]),
                  encoder_hidden_states=torch.randn(1, 6, 16))
    run(name, m, inputs, 2)
    check_fused_rope(name, m, inputs, vd.WanRopeProcessor, 4, calls=2)

# Wan2.2-Animate: Wan's processor copied into its own module too
if hasattr(diffusers, "WanAnimateTransformer3DModel"):
    m = diffusers.WanAnimateTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=32, in_channels=12, latent_channels=4,
        out_channels=4, text_dim=16, freq_dim=32, ffn_dim=64, num_layers=2, rope_max_seq_len=32, image_dim=8,
        motion_encoder_size=32, motion_style_dim=16, motion_dim=4, motion_encoder_dim=16, face_encoder_hidden_dim=16,
        face_encoder_num_heads=2, inject_face_latents_blocks=1, motion_encoder_batch_size=2)
    inputs = dict(hidden_states=torch.randn(1, 12, 3, 16, 16), timestep=torch.tensor([900]),
                  encoder_hidden_states=torch.randn(1, 6, 16), encoder_hidden_states_image=torch.randn(1, 4, 8),
                  pose_hidden_states=torch.randn(1, 4, 2, 16, 16), face_pixel_values=torch.randn(1, 3, 5, 32, 32))
    run("Wan2.2-Animate", m, inputs, 2)
    # self- and cross-attention of both blocks swapped (the face adapter's stays stock), the
    # self-attention's RoPE fused
    check_fused_rope("Wan2.2-Animate", m, inputs, vd.WanRopeProcessor, 4, calls=2)

if hasattr(diffusers, "FluxTransformer2DModel"):
    m = diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=8, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=16, pooled_projection_dim=8, axes_dims_rope=(4, 6, 6))
    img_ids = torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(12.0), torch.arange(12.0), indexing="ij"),
                          -1).reshape(-1, 3)
    inputs = dict(hidden_states=torch.randn(1, 144, 8), encoder_hidden_states=torch.randn(1, 6, 16),
                  pooled_projections=torch.randn(1, 8), timestep=torch.tensor([0.9]), img_ids=img_ids,
                  txt_ids=torch.zeros(6, 3))
    run("Flux", m, inputs, 2)
    check_fused_rope("Flux", m, inputs, vd.FluxRopeProcessor, 2)

# Flux.2: the double-stream blocks through Flux's fused-RoPE processor, the
# single-stream blocks' (q, k, v and the MLP from one projection) through their own
if hasattr(diffusers, "Flux2Transformer2DModel"):
    m = diffusers.Flux2Transformer2DModel(
        patch_size=1, in_channels=8, num_layers=1, num_single_layers=2, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=16, timestep_guidance_channels=16, axes_dims_rope=(4, 4, 4, 4))
    img_ids = torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(12.0), torch.arange(12.0), torch.zeros(1),
                                         indexing="ij"), -1).reshape(1, -1, 4)
    txt_ids = torch.zeros(1, 6, 4)
    txt_ids[0, :, 3] = torch.arange(6.0)
    inputs = dict(hidden_states=torch.randn(1, 144, 8), encoder_hidden_states=torch.randn(1, 6, 16),
                  timestep=torch.tensor([0.9]), img_ids=img_ids, txt_ids=txt_ids, guidance=torch.tensor([3.5]))
    run("Flux.2", m, inputs, 3)
    check_fused_rope("Flux.2 double-stream", m, inputs, vd.FluxRopeProcessor, 1, calls=3)
    check_fused_rope("Flux.2 single-stream", m, inputs, vd.Flux2ParallelRopeProcessor, 2, calls=3)

# Kandinsky 5: the text blocks' and the visual blocks' self-attention with RoPE
# (each pair's rotation matrix), the visual blocks' cross-attention on SDPA.
if hasattr(diffusers, "Kandinsky5Transformer3DModel"):
    m = diffusers.Kandinsky5Transformer3DModel(
        in_visual_dim=4, in_text_dim=16, in_text_dim2=8, time_dim=16, out_visual_dim=4, patch_size=(1, 2, 2),
        model_dim=64, ff_dim=64, num_text_blocks=1, num_visual_blocks=1, axes_dims=(8, 12, 12))
    inputs = dict(hidden_states=torch.randn(1, 2, 16, 16, 4), encoder_hidden_states=torch.randn(1, 6, 16),
                  pooled_projections=torch.randn(1, 8), timestep=torch.tensor([0.9]),
                  visual_rope_pos=(torch.arange(2), torch.arange(8), torch.arange(8)), text_rope_pos=torch.arange(6))
    run("Kandinsky 5", m, inputs, 2)
    check_fused_rope("Kandinsky 5", m, inputs, vd.Kandinsky5RopeProcessor, 3, calls=2, stock_rounds=True)
    # two samples: the visual blocks' tables are per sample, so their stock processor
    # rotates; the text block's are one for the batch and stay fused
    pair = {key: torch.cat([x, x]).to(device) if key in ("hidden_states", "encoder_hidden_states",
                                                         "pooled_projections") else x for key, x in inputs.items()}
    with torch.no_grad():
        vd.set_backend(m, num_inference_steps=4)
        r0 = vd.stats["vcattn:rope"]
        m(**pair, return_dict=False)
        vd.disable(m)
    check(vd.stats["vcattn:rope"] - r0 == 1, "Kandinsky 5, two samples: %d calls brought RoPE tables, want 1"
          % (vd.stats["vcattn:rope"] - r0))

# Helios: Wan-like, with per-sample tables [B, S, 2D] over the history and current
# tokens; with the history keys amplified (scaled after their rotation) the
# self-attention stays on the stock processor, RoPE in PyTorch
if hasattr(diffusers, "HeliosTransformer3DModel"):
    for amplify in (False, True):
        m = diffusers.HeliosTransformer3DModel(
            patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=32, in_channels=4, out_channels=4,
            text_dim=16, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
            rope_dim=(8, 12, 12), has_multi_term_memory_patch=True, guidance_cross_attn=True, zero_history_timestep=True,
            is_amplify_history=amplify)
        inputs = dict(hidden_states=torch.randn(1, 4, 2, 16, 16), timestep=torch.tensor([500]),
                      encoder_hidden_states=torch.randn(1, 6, 16), indices_hidden_states=torch.ones(1, 2),
                      indices_latents_history_short=torch.ones(1, 1), indices_latents_history_mid=torch.ones(1, 1),
                      indices_latents_history_long=torch.ones(1, 4), latents_history_short=torch.randn(1, 4, 1, 16, 16),
                      latents_history_mid=torch.randn(1, 4, 1, 16, 16), latents_history_long=torch.randn(1, 4, 4, 16, 16))
        name = "Helios (history amplified)" if amplify else "Helios"
        run(name, m, inputs, 2)
        check_fused_rope(name, m, inputs, vd.HeliosRopeProcessor, 4, calls=0 if amplify else 2)

# Cosmos: its processor names no attention backend (it runs on diffusers' process-wide
# default), so its self-attention reaches vcattn through the fused-RoPE processor, which
# rotates the pairs (i, i + D/2) in the quantizers; its cross-attention stays stock
if hasattr(diffusers, "CosmosTransformer3DModel"):
    m = diffusers.CosmosTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=32, num_layers=2, mlp_ratio=2,
        text_embed_dim=16, adaln_lora_dim=4, max_size=(4, 32, 32), patch_size=(1, 2, 2), rope_scale=(2.0, 1.0, 1.0),
        concat_padding_mask=False, extra_pos_embed_type="learnable")
    inputs = dict(hidden_states=torch.randn(1, 4, 2, 16, 16), timestep=torch.tensor([500]),
                  encoder_hidden_states=torch.randn(1, 6, 16), attention_mask=torch.ones(1, 6), fps=30)
    r0 = vd.stats["vcattn:rope"]
    run("Cosmos", m, inputs, 2)
    check(vd.stats["vcattn:rope"] - r0 == 2, "Cosmos: %d calls brought RoPE tables, want 2"
          % (vd.stats["vcattn:rope"] - r0))
    # the fused processor against the stock one on the drop-in backend (RoPE in PyTorch): the same bits
    # on the CPU; Cosmos's tables repeat each angle in both halves
    from diffusers.models.attention_dispatch import attention_backend
    attn = m.transformer_blocks[0].attn1
    angles = torch.rand(64, 16) * 6.3
    tables = tuple(torch.cat([t, t], -1).to(device) for t in (angles.cos(), angles.sin()))
    hidden = torch.randn(1, 64, attn.to_q.in_features, device=device)
    with torch.no_grad():
        with attention_backend("vcattn"):
            want = attn.processor(attn, hidden, image_rotary_emb=tables)
        got = vd.CosmosRopeProcessor(attn.processor)(attn, hidden, image_rotary_emb=tables)
    diff = ((got - want).norm() / want.norm()).item()
    check(torch.equal(got, want) if device == "cpu" else diff < 1e-2,
          "Cosmos: fused RoPE vs RoPE in PyTorch: relative difference %.2e" % diff)

# Processors that call torch SDPA themselves: no backend reaches them; said so, not silently ignored.
for cls, kwargs in (("CogVideoXTransformer3DModel", dict(num_attention_heads=2, attention_head_dim=16, in_channels=4,
                                                          out_channels=4, time_embed_dim=8, text_embed_dim=16,
                                                          num_layers=1, sample_width=8, sample_height=8,
                                                          sample_frames=5, max_text_seq_length=6)),
                    ("MochiTransformer3DModel", dict(num_attention_heads=2, attention_head_dim=16, num_layers=1,
                                                     pooled_projection_dim=8, in_channels=4, text_embed_dim=16,
                                                     time_embed_dim=8))):
    if not hasattr(diffusers, cls):
        continue
    model = getattr(diffusers, cls)(**kwargs)
    try:
        vd.set_backend(model, num_inference_steps=4)
        check(False, "%s accepted though its processors bypass the dispatcher" % cls)
        vd.disable(model)
    except TypeError as e:
        check("SDPA directly" in str(e), "%s: %s" % (cls, e))
    check(not vd._installed, "%s: a refused transformer stayed installed" % cls)

finish("test_diffusers_models (%s)" % device)
