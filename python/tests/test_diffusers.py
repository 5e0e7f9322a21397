"""vcattn.diffusers as a diffusers attention backend, on tiny random Wan
transformers and pipelines (exits 77 when torch or diffusers is missing):
the diffusers internals the registration relies on (a clear failure when they
move), set_attention_backend("vcattn"), every self-attention routed and
cross-attention left on SDPA, outputs close to SDPA and disable() exact, the
step from the timesteps (guidance passes share one, per-token timesteps, more
steps than announced), masks and causal calls, and whole WanPipeline runs:
40 steps with guidance group exactly on the schedule's steps, Wan2.2-A14B's
two experts, TI2V's per-token timesteps. CPU backend by default;
VCATTN_TEST_DEVICE=cuda runs the same checks on the GPU."""
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, finish, raises, skip, test_device  # noqa: E402

try:
    import torch
    from diffusers import WanTransformer3DModel
    from diffusers.models import attention_dispatch as ad
except ImportError as e:
    skip("test_diffusers", "needs torch and diffusers (%s)" % e)

import vcattn.diffusers as vd  # noqa: E402

device = test_device("test_diffusers")
name = "test_diffusers (%s)" % device

def calls():
    """vcattn calls that really reached the kernel so far (the ops count them when they run)."""
    return vd.stats["vcattn"]


# ---- the diffusers internals the backend registration relies on
member = ad.AttentionBackendName._value2member_map_.get("vcattn")
check(member is not None and ad.AttentionBackendName("vcattn") is member,
      "diffusers changed: AttentionBackendName('vcattn') does not give the member vcattn added")
check("vcattn" in {x.value for x in ad.AttentionBackendName.__members__.values()},
      "diffusers changed: set_attention_backend() checks AttentionBackendName.__members__, vcattn is not there")
check(ad._AttentionBackendRegistry._backends.get(member) is vd.attention_backend,
      "diffusers changed: _AttentionBackendRegistry._backends has no vcattn entry")
check({"query", "key", "value", "attn_mask", "is_causal", "scale", "return_lse"}
      <= set(ad._AttentionBackendRegistry._supported_arg_names.get(member, ())),
      "diffusers changed: the dispatcher would drop arguments vcattn needs")
check(vd.register() is member, "register() is not idempotent")
q = torch.randn(1, 64, 2, 32, device=device)
n0 = calls()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out = ad.dispatch_attention_fn(q, q, q, backend=member)
check(calls() - n0 == 1, "diffusers changed: dispatch_attention_fn(backend=vcattn) did not reach vcattn")
check(not [w for w in caught if "vcattn" in str(w.message)],
      "the drop-in backend, a documented route, warned: %s" % [str(w.message) for w in caught])
ref = ad.dispatch_attention_fn(q, q, q, backend=ad.AttentionBackendName.NATIVE)
rel = ((out - ref).norm() / ref.norm()).item()
check(0 < rel < 0.05, "dispatched vcattn vs SDPA: relative difference %.4f" % rel)
# the library forms an LSE only for a call that asks for one (return_lse: diffusers' context parallelism)
from vcattn import _core as core  # noqa: E402
given, c_run = [], core.run
core.run = lambda *a, **kw: (given.append(a[6].value is not None), c_run(*a, **kw))[1]
try:
    plain = vd.attention_backend(q, q, q)
    with_lse, lse = vd.attention_backend(q, q, q, return_lse=True)
finally:
    core.run = c_run
check(given == [False, True] and torch.equal(plain, with_lse) and lse.numel() == 128,
      "the backend's LSE buffers (without, with return_lse): %s, lse %s" % (given, tuple(lse.shape)))
# what a diffusers that moved these internals gets: the name of what is missing, not an AttributeError later
saved = ad._AttentionBackendRegistry._supported_arg_names
del ad._AttentionBackendRegistry._supported_arg_names
raises(RuntimeError, vd._dispatcher, "_AttentionBackendRegistry._supported_arg_names", "moved internals")
ad._AttentionBackendRegistry._supported_arg_names = saved

# ---- a tiny Wan transformer
torch.manual_seed(0)


def wan(layers=2):
    return WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=64,
                                 in_channels=16, out_channels=16, text_dim=32, freq_dim=32, ffn_dim=64,
                                 num_layers=layers, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                 rope_max_seq_len=32).eval().to(device)


model = wan()
x, text = torch.randn(1, 16, 4, 16, 16, device=device), torch.randn(1, 12, 32, device=device)


def forward(t):
    with torch.no_grad():
        timestep = t if isinstance(t, torch.Tensor) else torch.tensor([t], device=device)
        return model(x, timestep=timestep, encoder_hidden_states=text, return_dict=False)[0]


ref = forward(999)
n0 = calls()
model.set_attention_backend("vcattn")  # diffusers' own API, by name
forward(999)
check(calls() - n0 == len(model.blocks), "set_attention_backend('vcattn'): %d vcattn calls" % (calls() - n0))
model.reset_attention_backend()
ad._AttentionBackendRegistry.set_active_backend(ad.AttentionBackendName.NATIVE)  # set_attention_backend set it
check(torch.equal(forward(999), ref), "reset_attention_backend() did not restore SDPA")

# ---- set_backend: layer states, steps, guidance passes
stats0 = dict(vd.stats)
handle = vd.set_backend(model, num_inference_steps=4)
steps = []
for t in (999, 999, 700, 700, 400, 400):  # two guidance passes per step
    out = forward(t)
    steps.append(handle.step)
    if len(steps) == 1:
        first = out
routed = vd.stats["vcattn"] - stats0.get("vcattn", 0)
check(routed == 6 * len(model.blocks), "self-attention calls routed: %d" % routed)
check(vd.stats["sdpa:cross"] - stats0.get("sdpa:cross", 0) == 6 * len(model.blocks),
      "cross-attention calls on SDPA: %d" % (vd.stats["sdpa:cross"] - stats0.get("sdpa:cross", 0)))
check(steps == [0, 0, 1, 1, 2, 2], "steps %s" % steps)
check(sorted(k[1] for k in handle.layers()) == list(range(len(model.blocks))),
      "layer states keyed by their call's place in the forward: %s" % sorted(handle.layers()))
check([s for _, s, _ in handle.groupings] == [0] * len(model.blocks), "groupings %s" % handle.groupings)
reused = vd.stats["vcattn:reuse"] - stats0.get("vcattn:reuse", 0)
check(reused == len(model.blocks), "the second guidance pass of a grouping step reused the grouping %d times, "
      "want once per block" % reused)
cos = torch.nn.functional.cosine_similarity(first.flatten(), ref.flatten(), dim=0).item()
check(cos > 0.99, "cosine to SDPA %.5f" % cos)
for t in (300, 200, 100, 50):  # more steps than num_inference_steps: past the window, no error
    forward(t)
check(handle.step == 6, "step after 7 steps: %d" % handle.step)
per_token = torch.full((1, 4 * 8 * 8), 20.0, device=device)
per_token[:, :64] = 0  # TI2V: the first frame's tokens at timestep 0
forward(per_token)
check(handle.step == 7, "a per-token timestep tensor did not make a new step: %d" % handle.step)
h = torch.randn(1, 256, 128, device=device)
with torch.no_grad():
    routed = model.blocks[0].attn1(h)
forward(999)  # a higher timestep starts a new generation (bare transformer)
check(handle.step == 0 and len(handle.groupings) == len(model.blocks), "new generation: step %d, groupings %s"
      % (handle.step, handle.groupings))
import ctypes  # noqa: E402
from vcattn import _core  # noqa: E402
state = next(iter(handle.layers().values()))  # step 0, grouped: a second pass must reuse, not regroup
plans = [_core.lib().vcattn_layer_plan(state.c_layer(), ctypes.byref(c)) for c in (_core.config("vc"),
                                                                                  _core.config("vc", **vd._REUSE_GROUPING))]
check(plans == [2, 3], "plans at a grouped step 0: %s, expected warm then reuse" % plans)
raises(RuntimeError, lambda: vd.set_backend(model, num_inference_steps=4), "already enabled", "enabled twice")
vd.disable(model)
with torch.no_grad():
    plain = model.blocks[0].attn1(h)
rel = ((routed - plain).norm() / plain.norm()).item()
check(0 < rel < 0.05, "self-attention output vs SDPA: relative difference %.4f" % rel)
check(torch.equal(forward(999), ref), "disable() did not restore the original outputs exactly")
raises(ValueError, lambda: vd.set_backend(model, method="nope"), "unknown method", "unknown method")
check(not vd._installed, "a refused set_backend stayed installed")

# ---- Wan's RoPE inside the quantizers (set_backend's default): every Wan attention
# gets the processor (cross-attention runs the stock code in it), the outputs are
# those of rotating q and k in PyTorch first (bit for bit on the CPU, where both
# round each float32 product and difference once), disable() puts the stock
# processors back
handle = vd.set_backend(model, num_inference_steps=4)
swapped = [m for m in model.modules() if isinstance(getattr(m, "processor", None), vd.WanRopeProcessor)]
check(len(swapped) == 2 * len(model.blocks), "WanRopeProcessor on %d modules, want %d"
      % (len(swapped), 2 * len(model.blocks)))
n0, r0 = calls(), vd.stats["vcattn:rope"]
fused = forward(999)
check(calls() - n0 == len(model.blocks) and vd.stats["vcattn:rope"] - r0 == len(model.blocks),
      "fused RoPE: %d vcattn calls, %d with RoPE tables" % (calls() - n0, vd.stats["vcattn:rope"] - r0))
vd.disable(model)
check(not [m for m in model.modules() if isinstance(getattr(m, "processor", None), vd.WanRopeProcessor)],
      "disable() left a WanRopeProcessor")
handle = vd.set_backend(model, num_inference_steps=4, fuse_rope=False)
unfused = forward(999)
vd.disable(model)
if device == "cpu":
    check(torch.equal(fused, unfused), "fused RoPE differs from RoPE in PyTorch: %.2e"
          % ((fused - unfused).norm() / unfused.norm()).item())
else:
    diff = ((fused - unfused).norm() / unfused.norm()).item()
    check(diff < 1e-3, "fused RoPE vs RoPE in PyTorch: relative difference %.2e" % diff)
check(torch.equal(forward(999), ref), "disable() after fused RoPE did not restore the original outputs exactly")

# ---- masks, causal calls, context parallelism (the backend called as the dispatcher calls it)
qkv = [torch.randn(2, 256, 2, 64, device=device) for _ in range(3)]
keep = torch.ones(2, 256, dtype=torch.bool, device=device)
keep[1, 200:] = False  # padding keys in the second sample
sdpa = ad._AttentionBackendRegistry._backends[ad.AttentionBackendName.NATIVE]
for mask in (keep, keep[:, None, None, :], torch.zeros(2, 1, 1, 256, device=device).masked_fill(~keep[:, None, None],
                                                                                                  float("-inf"))):
    n0 = calls()
    got = vd.attention_backend(*qkv, attn_mask=mask)
    want = sdpa(*qkv, attn_mask=mask)
    rel = ((got - want).norm() / want.norm()).item()
    check(calls() - n0 == 2 and 0 < rel < 0.05, "key-padding mask %s: %d vcattn calls, relative difference %.4f"
          % (tuple(mask.shape), calls() - n0, rel))
# a mask shaped as key padding whose values are a bias, not keep/hide: found when
# the op runs, so SDPA there gives the native result (to rounding: other layout)
bias = torch.zeros(2, 1, 1, 256, device=device)
bias[1, ..., 100:] = -0.5
n0, m0 = calls(), vd.stats["sdpa:mask"]
got = vd.attention_backend(*qkv, attn_mask=bias)
want = sdpa(*qkv, attn_mask=bias)
check(calls() == n0 and vd.stats["sdpa:mask"] == m0 + 1 and torch.allclose(got, want, atol=1e-5),
      "a bias mask of key-padding shape: %d vcattn calls, difference %.2e" % (calls() - n0, (got - want).abs().max()))
for label, kwargs, needle in (("general mask", dict(attn_mask=torch.rand(256, 256, device=device) > 0.5), "mask"),
                              ("causal", dict(is_causal=True), "causal")):
    n0 = calls()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = vd.attention_backend(*qkv, **kwargs)
    check(calls() == n0 and torch.equal(got, sdpa(*qkv, **kwargs)), "%s: not SDPA's exact output" % label)
    check(any(needle in str(w.message) and "SDPA" in str(w.message) for w in caught), "%s: no warning" % label)
# a parallel config without context parallelism (tensor parallelism shards heads before the call): the
# ordinary call; context parallelism itself runs in test_diffusers_parallel.py (two processes)
check(torch.equal(vd.attention_backend(*qkv, _parallel_config=object()), vd.attention_backend(*qkv)),
      "a parallel config without context parallelism changed the call")
# the length rule (CUDA calls under vcattn.SDPA_BELOW_KEYS keys per head go to SDPA), made to hold
# here too so its route is checked on any device: SDPA's exact output, counted, RoPE applied first
from vcattn import _core  # noqa: E402
rule = _core.too_short_for_gpu
_core.too_short_for_gpu = lambda device_type, keys: keys < 1024
try:
    n0, s0 = calls(), vd.stats["sdpa:short"]
    check(torch.equal(vd.attention_backend(*qkv), sdpa(*qkv)) and calls() == n0 and vd.stats["sdpa:short"] == s0 + 1,
          "length rule: a short call is not SDPA's exact output, counted")
    angle = torch.rand(256, 32, device=device) * 6.0
    cos, sin = angle.cos(), angle.sin()
    got = vd._route(False, *qkv, None, 0.0, False, None, False, False, None, rope=(cos, sin))
    want = sdpa(vd._rotate(qkv[0], cos, sin), vd._rotate(qkv[1], cos, sin), qkv[2])
    check(torch.equal(got, want) and vd.stats["sdpa:short"] == s0 + 2,
          "length rule with RoPE tables: not SDPA on the rotated q and k")
    _core.too_short_for_gpu = lambda device_type, keys: keys < 128
    n0 = calls()
    vd.attention_backend(*qkv)
    check(calls() == n0 + 1, "length rule: a call at or past the threshold left vcattn")
finally:
    _core.too_short_for_gpu = rule

# ---- whole pipelines (WanPipeline needs transformers for its imports)
try:
    from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline
except ImportError as e:
    print("%s: pipeline checks SKIPPED, WanPipeline unavailable (%s)" % (name, e))
    finish(name)


def pipeline(**kwargs):
    pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=None, scheduler=FlowMatchEulerDiscreteScheduler(),
                       **kwargs)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def generate(pipe, steps, frames=5):
    with torch.no_grad():
        return pipe(prompt_embeds=text, negative_prompt_embeds=torch.randn_like(text), height=32, width=32,
                    num_frames=frames, num_inference_steps=steps, guidance_scale=5.0, output_type="latent",
                    generator=torch.Generator(device).manual_seed(0)).frames


pipe = pipeline(transformer=model)
handle = vd.enable(pipe)
n0 = calls()
generate(pipe, 40)
layers = len(model.blocks)
check(calls() - n0 == 40 * 2 * layers, "40 steps with guidance: %d vcattn calls" % (calls() - n0))
check(handle.step == 39 and handle.num_inference_steps == 40, "step %d of %d" % (handle.step,
                                                                                  handle.num_inference_steps))
per_layer = {}
for key, step, kind in handle.groupings:
    per_layer.setdefault(key, []).append((step, kind))
check(len(per_layer) == layers and all(g == [(0, "cold"), (4, "warm"), (8, "warm")] for g in per_layer.values()),
      "40 steps with guidance grouped at %s (the schedule: steps 0, 4, 8, once each)" % per_layer)
generate(pipe, 6)  # a new generation with another step count, from the scheduler
check(handle.num_inference_steps == 6 and handle.step == 5, "second generation: step %d of %d"
      % (handle.step, handle.num_inference_steps))
vd.disable(pipe)

# Wan2.2-A14B: two experts, one step count
expert2 = wan()
pipe = pipeline(transformer=model, transformer_2=expert2, boundary_ratio=0.5)
handle = vd.enable(pipe)
n0 = calls()
generate(pipe, 8)
labels = {k[0] for k in handle.layers()}
check(labels == {"transformer", "transformer_2"}, "A14B experts routed: %s" % labels)
check(calls() - n0 == 8 * 2 * layers, "A14B: %d vcattn calls" % (calls() - n0))
late = [s.step for k, s in handle.layers().items() if k[0] == "transformer_2"]
check(late and all(s == 7 for s in late), "the second expert's layers end at step %s, not the pipeline's 7" % late)
check({(k[0], s) for k, s, _ in handle.groupings} == {("transformer", 0)}, "A14B groupings %s" % handle.groupings)
vd.disable(pipe)

# Wan2.2 TI2V: per-token timesteps from the pipeline
pipe = pipeline(transformer=model, expand_timesteps=True)
handle = vd.enable(pipe)
generate(pipe, 6)
check(handle.step == 5, "TI2V per-token timesteps: last step %d, expected 5" % handle.step)
vd.disable(pipe)
check(torch.equal(forward(999), ref), "disable(pipe) did not restore the original outputs exactly")

finish(name)
