"""vcattn's diffusers backends under torch.compile, as video-model users run
them: a tiny Wan, a tiny Flux and a tiny HunyuanVideo (its text padding mask
reaches vcattn as a key-padding mask), and HunyuanVideo-1.5 compiled
regionally (its own forward breaks the graph), 4 denoising steps of 2 classifier-free
guidance passes each, with the drop-in backend (set_attention_backend
"vcattn") and with the grouping schedule (set_backend). For
torch.compile(model, fullgraph=True) and compile_repeated_blocks(fullgraph=True):
as many graphs as diffusers' native backend gives in the same process, no
recompile after the first step, outputs equal to the eager vcattn run's to
rounding, and the schedule's groupings (which layer grouped at which step,
cold or warm) the same as eager; the same for enable(pipe) on a WanPipeline
whose transformer is compiled in place. torch.library.opcheck on every
vcattn op.
CPU by default; VCATTN_TEST_DEVICE=cuda runs it on the GPU and adds
mode="reduce-overhead" (CUDA graphs). Exits 77 without torch and diffusers."""
import copy
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, finish, skip, test_device  # noqa: E402

try:
    import torch
    import diffusers
    from torch._dynamo.utils import counters
except ImportError as e:
    skip("test_compile", "needs torch and diffusers (%s)" % e)

import vcattn  # noqa: E402
import vcattn.diffusers as vd  # noqa: E402

device = test_device("test_compile")
name = "test_compile (%s)" % device
warnings.simplefilter("ignore")  # the backends' one-time warnings are checked in test_diffusers
# Outputs of a compiled run against the eager run of the same backend: the
# compiler fuses the projections, norms and RoPE around the attention, so
# its inputs differ by float rounding, which can move a quantized code by
# one step; a relative difference this small is rounding, a wrong layer or
# step is percent-level.
ROUNDING = 2e-3 if device == "cpu" else 1e-2
STEPS, PASSES = 4, 2


def rand_init(model):
    torch.manual_seed(1)
    with torch.no_grad():  # diffusers zero-initialises some projections: random weights everywhere
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    return model.eval().to(device)


def wan():
    m = diffusers.WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=64, in_channels=16, out_channels=16,
        text_dim=32, freq_dim=32, ffn_dim=64, num_layers=3, cross_attn_norm=True,
        qk_norm="rms_norm_across_heads", rope_max_seq_len=32)
    x = torch.randn(1, 16, 4, 16, 16)
    texts = [torch.randn(1, 12, 32) for _ in range(PASSES)]  # conditional and unconditional prompt
    return m, lambda t, i: dict(hidden_states=x, timestep=torch.tensor([t]), encoder_hidden_states=texts[i])


def flux():
    m = diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=8, num_layers=2, num_single_layers=2, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=16, pooled_projection_dim=8, axes_dims_rope=(4, 6, 6))
    img_ids = torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(16.0), torch.arange(16.0), indexing="ij"),
                          -1).reshape(-1, 3)
    x = torch.randn(1, 256, 8)
    texts = [(torch.randn(1, 6, 16), torch.randn(1, 8)) for _ in range(PASSES)]
    return m, lambda t, i: dict(hidden_states=x, encoder_hidden_states=texts[i][0], pooled_projections=texts[i][1],
                                timestep=torch.tensor([t / 1000.0]), img_ids=img_ids, txt_ids=torch.zeros(6, 3))


def hunyuan():
    m = diffusers.HunyuanVideoTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=32, num_layers=2,
        num_single_layers=2, num_refiner_layers=1, patch_size=1, text_embed_dim=16, pooled_projection_dim=8,
        rope_axes_dim=(8, 12, 12))
    x = torch.randn(1, 4, 2, 8, 8)
    masks = [torch.tensor([[1, 1, 1, 1, 0, 0]]), torch.tensor([[1, 1, 1, 1, 1, 0]])]  # padding tokens in the text
    texts = [(torch.randn(1, 6, 16), torch.randn(1, 8)) for _ in range(PASSES)]
    return m, lambda t, i: dict(hidden_states=x, timestep=torch.tensor([t]), encoder_hidden_states=texts[i][0],
                                encoder_attention_mask=masks[i], pooled_projections=texts[i][1],
                                guidance=torch.tensor([3000.0]))


def hunyuan15():
    m = diffusers.HunyuanVideo15Transformer3DModel(
        in_channels=9, out_channels=4, num_attention_heads=2, attention_head_dim=32, num_layers=2,
        num_refiner_layers=1, patch_size=1, text_embed_dim=16, text_embed_2_dim=8, image_embed_dim=8,
        rope_axes_dim=(8, 12, 12), task_type="t2v")
    x = torch.randn(1, 9, 2, 8, 8)
    masks = [torch.tensor([[1, 1, 1, 1, 0, 0]]), torch.tensor([[1, 1, 1, 1, 1, 0]])]  # padding tokens in the text
    texts = [(torch.randn(1, 6, 16), torch.randn(1, 5, 8)) for _ in range(PASSES)]
    return m, lambda t, i: dict(hidden_states=x, timestep=torch.tensor([float(t)]), encoder_hidden_states=texts[i][0],
                                encoder_attention_mask=masks[i], encoder_hidden_states_2=texts[i][1],
                                encoder_attention_mask_2=torch.ones(1, 5), image_embeds=torch.zeros(1, 4, 8))


def to_device(inputs):
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in inputs.items()}


def run(base, inputs, backend, compile_how=None, mode=None):
    """4 steps x 2 passes of a copy of base: (outputs, graphs after the first
    step, graphs in all, groupings or None)."""
    model = copy.deepcopy(base)
    handle = None
    if backend == "dropin":
        model.set_attention_backend("vcattn")
    elif backend == "schedule":
        handle = vd.set_backend(model, num_inference_steps=STEPS)
    torch._dynamo.reset()
    counters.clear()
    call = model
    outs, first = [], None
    try:
        if compile_how == "full":
            call = torch.compile(model, fullgraph=True, mode=mode)
        elif compile_how == "regional":
            model.compile_repeated_blocks(fullgraph=True, mode=mode)
        with torch.no_grad():
            for step, t in enumerate((999, 750, 500, 250)):
                for i in range(PASSES):
                    outs.append(call(**to_device(inputs(t, i)), return_dict=False)[0].clone())
                if step == 0:
                    first = counters["stats"]["unique_graphs"]
    finally:
        groupings = sorted(handle.groupings) if handle is not None else None
        if handle is not None:
            vd.disable(model)
        ad = diffusers.models.attention_dispatch
        ad._AttentionBackendRegistry.set_active_backend(ad.AttentionBackendName.NATIVE)  # set_attention_backend set it
    return outs, first, counters["stats"]["unique_graphs"], groupings


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def check_model(label, make, whole_model=True, dropin_reaches=True):
    """whole_model=False: regional compilation only (the model's own forward
    breaks the graph, whatever the backend); dropin_reaches=False: the stock
    processors give the drop-in backend calls it sends to SDPA."""
    torch.manual_seed(0)
    base, inputs = make()
    rand_init(base)
    eager = {backend: run(base, inputs, backend) for backend in ("dropin", "schedule")}
    for backend in ("dropin", "schedule"):
        n0 = vd.stats["vcattn"]
        run(base, inputs, backend)
        if backend == "schedule" or dropin_reaches:
            check(vd.stats["vcattn"] > n0, "%s, %s: no call reached vcattn" % (label, backend))
    ways = [("full", None), ("regional", None)] if whole_model else [("regional", None)]
    if device == "cuda" and whole_model:
        ways.append(("full", "reduce-overhead"))
    for how, mode in ways:
        what = "%s, %s%s" % (label, how, ", " + mode if mode else "")
        native = run(base, inputs, "native", how, mode)
        check(native[2] >= 1, "%s: the native backend compiled no graph" % what)
        for backend in ("dropin", "schedule"):
            try:
                outs, first, graphs, groupings = run(base, inputs, backend, how, mode)
            except Exception as e:  # fullgraph=True raises on a graph break
                check(False, "%s, %s: %s: %s" % (what, backend, type(e).__name__, str(e).splitlines()[0]))
                continue
            check(graphs == native[2], "%s, %s: %d graphs, the native backend %d" % (what, backend, graphs, native[2]))
            check(first == graphs, "%s, %s: %d graphs after the first step, %d after all: recompiled"
                  % (what, backend, first, graphs))
            worst = max(rel(a, b) for a, b in zip(outs, eager[backend][0]))
            check(worst < ROUNDING, "%s, %s: compiled vs eager relative difference %.2e" % (what, backend, worst))
            if backend == "schedule":
                check(groupings == eager[backend][3] and groupings,
                      "%s: groupings compiled %s, eager %s" % (what, groupings, eager[backend][3]))
            print("%s, %s: %d graphs (native %d), compiled vs eager %.1e%s" % (
                what, backend, graphs, native[2], worst,
                ", %d groupings as eager" % len(groupings) if groupings else ""))


def opcheck(op, args, what):
    """torch.library.opcheck, its failure naming the op and the case."""
    try:
        torch.library.opcheck(op, args)
    except Exception as e:
        raise AssertionError("%s, %s: %s: %s" % (op, what, type(e).__name__, e)) from e


def check_opcheck():
    q, k, v = (torch.randn(1, 2, 200, 64, device=device) for _ in range(3))
    angles = torch.rand(200, 32, device=device) * 6.3
    cos, sin = angles.cos(), angles.sin()
    # opcheck runs each op several times and compares: a layer state at a
    # grouping step would group cold, then warm from its own centroids, which
    # may move a boundary between the runs. So the state groups once here and
    # the op is checked at a step that reuses that grouping.
    state = vcattn.LayerState(40)
    from vcattn import _torch_op
    vcattn.attention(q, k, v, sm_scale=0.125, state=state)
    state.step = 1
    check(state.plan() == "reuse", "opcheck: step 1 after a grouping reuses it (plan %r)" % state.plan())
    head_cos, head_sin = cos.expand(1, 2, 200, 32).contiguous(), sin.expand(1, 2, 200, 32).contiguous()
    for token in (None, _torch_op._layer_token(state)):
        for rope in ((None, None, 0), (cos, sin, 1), (head_cos, head_sin, 0)):
            opcheck(torch.ops.vcattn.attention.default, (q, k, v, "HND", 0.125, "vc", "", token, True, *rope),
                    "layer state %s, rope %s" % (token is not None, rope[0] is not None))
    nhd = [t.transpose(1, 2).contiguous() for t in (q, k, v)]
    keep = torch.ones(1, 200, dtype=torch.bool, device=device)
    keep[:, 150:] = False
    for mask in (None, keep):
        for rope in ((None, None), (cos, sin)):
            if mask is None:
                opcheck(torch.ops.vcattn.dit_attention.default, (*nhd, 0.125, *rope), "rope %s" % (rope[0] is not None))
            else:
                opcheck(torch.ops.vcattn.dit_masked_attention.default, (*nhd, 0.125, mask, *rope),
                        "rope %s" % (rope[0] is not None))
            opcheck(torch.ops.vcattn.dit_layer_attention.default, (*nhd, vd._clock, 0.125, mask, *rope),
                    "mask %s, rope %s" % (mask is not None, rope[0] is not None))
    # per-head tables and the pairs (i, i + D/2) through the diffusers ops
    opcheck(torch.ops.vcattn.dit_attention.default, (*nhd, 0.125, head_cos, head_sin, True, 1), "per-head, half")
    opcheck(torch.ops.vcattn.dit_layer_attention.default, (*nhd, vd._clock, 0.125, keep, head_cos, head_sin, False, 1),
            "masked, per-head, half")
    # without an LSE asked for: an empty lse and the same output (the library forms none)
    opcheck(torch.ops.vcattn.attention.default, (q, k, v, "HND", 0.125, "vc", "", None, True, None, None, 0, False),
            "no lse")
    opcheck(torch.ops.vcattn.dit_attention.default, (*nhd, 0.125, None, None, False), "no lse")
    opcheck(torch.ops.vcattn.dit_layer_attention.default, (*nhd, vd._clock, 0.125, None, None, None, False), "no lse")
    with_lse = torch.ops.vcattn.attention(q, k, v, "HND", 0.125, "vc", "", None, True, None, None, 0)
    without = torch.ops.vcattn.attention(q, k, v, "HND", 0.125, "vc", "", None, True, None, None, 0, False)
    check(tuple(with_lse[1].shape) == (1, 2, 200) and without[1].numel() == 0 and torch.equal(with_lse[0], without[0]),
          "vcattn::attention without an LSE: empty lse %s, the same output" % (tuple(without[1].shape),))
    out, lse = vcattn.attention(q, k, v, sm_scale=0.125, return_lse=True)
    check(torch.equal(vcattn.attention(q, k, v, sm_scale=0.125), out) and torch.isfinite(lse).all().item(),
          "vcattn.attention: the same output with and without return_lse")
    opcheck(torch.ops.vcattn.dit_forward.default, (vd._clock.clone(), torch.tensor([999.0]), 0), "no installation")
    check(True, "opcheck")
    print("%s: torch.library.opcheck passes on vcattn::attention, dit_attention, dit_masked_attention, "
          "dit_layer_attention, dit_forward"
          % name)


def check_pipeline():
    """enable(pipe) on a WanPipeline (steps from its scheduler), its transformer compiled in place."""
    try:
        from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline
    except ImportError as e:
        check(False, "WanPipeline unavailable: %s" % e)
        return
    torch.manual_seed(0)
    base, _ = wan()
    rand_init(base)
    text = torch.randn(1, 12, 32, device=device)
    negative = torch.randn(1, 12, 32, device=device)

    def generate(backend, compile_how=None):
        model = copy.deepcopy(base)
        pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=None,
                           scheduler=FlowMatchEulerDiscreteScheduler(), transformer=model)
        pipe.set_progress_bar_config(disable=True)
        handle = vd.enable(pipe) if backend == "schedule" else None
        torch._dynamo.reset()
        counters.clear()
        try:
            if compile_how == "full":
                model.compile(fullgraph=True)
            elif compile_how == "regional":
                model.compile_repeated_blocks(fullgraph=True)
            with torch.no_grad():
                out = pipe(prompt_embeds=text, negative_prompt_embeds=negative, height=64, width=64, num_frames=5,
                           num_inference_steps=STEPS, guidance_scale=5.0, output_type="latent",
                           generator=torch.Generator(device).manual_seed(0)).frames
        finally:
            if handle is not None:
                vd.disable(pipe)
        return out, counters["stats"]["unique_graphs"], sorted(handle.groupings) if handle else None

    eager = generate("schedule")
    for how in ("full", "regional"):
        native = generate("native", how)
        try:
            out, graphs, groupings = generate("schedule", how)
        except Exception as e:
            check(False, "WanPipeline, enable(pipe), %s: %s: %s" % (how, type(e).__name__, str(e).splitlines()[0]))
            continue
        check(graphs == native[1], "WanPipeline, enable(pipe), %s: %d graphs, native %d" % (how, graphs, native[1]))
        check(groupings == eager[2] and groupings, "WanPipeline, %s: groupings %s, eager %s" % (how, groupings, eager[2]))
        diff = rel(out, eager[0])  # after 4 steps that feed each output back in: a few calls' rounding
        check(diff < 3 * ROUNDING, "WanPipeline, %s: compiled vs eager relative difference %.2e" % (how, diff))
        print("WanPipeline, enable(pipe), %s: %d graphs (native %d), %d groupings as eager, compiled vs eager %.1e"
              % (how, graphs, native[1], len(groupings or ()), diff))


try:
    check_opcheck()
except Exception as e:
    check(False, "opcheck: %s: %s" % (type(e).__name__, e))
for label, make in (("Wan", wan), ("Flux", flux), ("HunyuanVideo", hunyuan)):
    check_model(label, make)
# HunyuanVideo-1.5: its processor reads the padding mask and fuses the RoPE; the
# model's forward branches on data (task type), so regional compilation only
# (its stock processor's general mask sends the drop-in backend's calls to SDPA)
check_model("HunyuanVideo-1.5", hunyuan15, whole_model=False, dropin_reaches=False)
check_pipeline()
finish(name)
