"""vcattn.diffusers on a tiny random WanTransformer3DModel (exits 77 when torch
or diffusers is missing): every self-attention routed, cross-attention
untouched, outputs close to SDPA, disable() restores the exact original
outputs, the step follows the timesteps, bad use is refused. CPU backend by
default; VCATTN_TEST_DEVICE=cuda runs the same checks on the GPU."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    from diffusers import WanTransformer3DModel
except ImportError as e:
    print("test_diffusers: SKIPPED, %s" % e)
    sys.exit(77)

import vcattn.diffusers as vd  # noqa: E402
from harness import check, finish  # noqa: E402

device = os.environ.get("VCATTN_TEST_DEVICE", "cpu")
if device == "cuda" and not torch.cuda.is_available():
    print("test_diffusers: SKIPPED, no CUDA device")
    sys.exit(77)
torch.manual_seed(0)
model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=64,
                              in_channels=16, out_channels=16, text_dim=32, freq_dim=32, ffn_dim=64,
                              num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                              rope_max_seq_len=32).eval().to(device)
x, text = torch.randn(1, 16, 4, 16, 16, device=device), torch.randn(1, 12, 32, device=device)


def forward(t):
    with torch.no_grad():
        return model(x, timestep=torch.tensor([t], device=device), encoder_hidden_states=text,
                     return_dict=False)[0]


calls = []
original_backend = vd.attention_backend
vd.attention_backend = lambda *a, **k: calls.append(1) or original_backend(*a, **k)

ref = forward(999)
cross = [type(b.attn2.processor) for b in model.blocks]
session = vd.enable(model, num_inference_steps=4)
steps = []
for t in (999, 999, 700, 400):  # two guidance passes share step 0
    out = forward(t)
    steps.append(session.step)
    if t == 999 and len(steps) == 1:
        first = out
check(len(calls) == 4 * len(model.blocks), "self-attention calls routed: %d" % len(calls))
check(steps == [0, 0, 1, 2], "steps %s" % steps)
check([type(b.attn2.processor) for b in model.blocks] == cross, "cross-attention processors changed")
cos = torch.nn.functional.cosine_similarity(first.flatten(), ref.flatten(), dim=0).item()
check(cos > 0.99, "cosine to SDPA %.5f" % cos)
h = torch.randn(1, 256, 128, device=device)
with torch.no_grad():
    routed = model.blocks[0].attn1(h)
forward(999)  # a higher timestep starts a new generation
check(session.step == 0, "new generation did not reset the step")
try:
    for t in (900, 800, 700, 600):
        forward(t)
    check(False, "a fifth step was accepted with num_inference_steps=4")
except ValueError as e:
    check("num_inference_steps" in str(e), str(e))
vd.disable(model)
with torch.no_grad():
    plain = model.blocks[0].attn1(h)
rel = ((routed - plain).norm() / plain.norm()).item()
check(0 < rel < 0.05, "self-attention output vs SDPA: relative difference %.4f" % rel)
check(torch.equal(forward(999), ref), "disable() did not restore the original outputs exactly")
try:
    vd.attention_backend(h.view(1, 256, 2, 64), h.view(1, 256, 2, 64), h.view(1, 256, 2, 64),
                         attn_mask=torch.ones(256, 256, dtype=torch.bool, device=device))
    check(False, "a mask was accepted")
except ValueError as e:
    check("mask" in str(e), str(e))
try:
    vd.enable(model, num_inference_steps=4, method="nope")
    check(False, "unknown method accepted")
except ValueError as e:
    check("unknown method" in str(e), str(e))

finish("test_diffusers (%s)" % device)
