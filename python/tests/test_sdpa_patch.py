"""torch.nn.functional.scaled_dot_product_attention = vcattn.sdpa, as users
patch it: a tiny diffusers Wan and Flux (their attention through
diffusers' native backend, which calls F.scaled_dot_product_attention) and
two transformers models whose attention is causal (GPT-2) or masked (BERT
with padding), each run once with torch's SDPA and once patched. The plain
calls must reach vcattn and stay within vc's error of SDPA's output; the
causal and masked calls must go to torch SDPA and give its exact result,
with no call of vcattn.sdpa sent back to itself. The patched Wan also
compiles (torch.compile, fullgraph) into one graph whose output is the eager
one's to rounding. The route counts are printed. CPU by default, VCATTN_TEST_DEVICE=cuda on the GPU. Exits 77
without torch, diffusers and transformers."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, finish, skip, test_device  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
    import diffusers
    import transformers
except ImportError as e:
    skip("test_sdpa_patch", "needs torch, diffusers and transformers (%s)" % e)

import vcattn  # noqa: E402

diffusers.utils.logging.set_verbosity_error()
transformers.logging.set_verbosity_error()
device = test_device("test_sdpa_patch")
dtype = torch.bfloat16 if device == "cuda" else torch.float32
# vc against SDPA through a few layers of random weights: its usual percent-level
# error (a wrong layout or a lost head is tens of percent).
VC_ERROR = 0.05


def rand_init(model):
    torch.manual_seed(1)
    with torch.no_grad():  # diffusers zero-initialises some projections: random weights everywhere
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    return model.eval().to(device, dtype)


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def run(label, make_output, plain_reaches_vcattn):
    """make_output() once with torch's SDPA, once patched; the routes taken."""
    torch.manual_seed(0)
    with torch.no_grad():
        want = make_output()
        before = dict(vcattn.sdpa_routes)
        F.scaled_dot_product_attention = vcattn.sdpa
        try:
            got = make_output()
        except RecursionError:
            check(False, "%s: vcattn.sdpa called itself (RecursionError)" % label)
            return
        finally:
            F.scaled_dot_product_attention = torch_sdpa
    routes = {k: n - before.get(k, 0) for k, n in vcattn.sdpa_routes.items() if n - before.get(k, 0)}
    check(bool(routes), "%s: F.scaled_dot_product_attention was never called" % label)
    err = rel(got, want)
    if plain_reaches_vcattn:
        check(routes.get("vcattn", 0) > 0, "%s: no call reached vcattn (routes %s)" % (label, routes))
        check(err < VC_ERROR, "%s: relative difference to SDPA %.3g" % (label, err))
    else:
        check(routes.get("vcattn", 0) == 0 and torch.equal(got, want),
              "%s: masked or causal calls not SDPA's exact result (routes %s, difference %.3g)"
              % (label, routes, err))
    print("%s: routes %s, relative difference to SDPA %.2e" % (label, routes, err))


torch_sdpa = F.scaled_dot_product_attention

wan = rand_init(diffusers.WanTransformer3DModel(
    patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=64, in_channels=16, out_channels=16,
    text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True,
    qk_norm="rms_norm_across_heads", rope_max_seq_len=32))
wan_x = torch.randn(1, 16, 4, 16, 16, device=device, dtype=dtype)
wan_text = torch.randn(1, 12, 32, device=device, dtype=dtype)
run("Wan", lambda: wan(hidden_states=wan_x, timestep=torch.tensor([500], device=device),
                       encoder_hidden_states=wan_text, return_dict=False)[0], True)

# The usual speed recipe: the patched model compiled whole.
from torch._dynamo.utils import counters  # noqa: E402
torch._dynamo.reset()
counters.clear()
with torch.no_grad():
    F.scaled_dot_product_attention = vcattn.sdpa
    try:
        eager = wan(hidden_states=wan_x, timestep=torch.tensor([500], device=device), encoder_hidden_states=wan_text,
                    return_dict=False)[0]
        compiled = torch.compile(wan, fullgraph=True)
        outs = [compiled(hidden_states=wan_x, timestep=torch.tensor([t], device=device),
                         encoder_hidden_states=wan_text, return_dict=False)[0] for t in (500, 400)]
    finally:
        F.scaled_dot_product_attention = torch_sdpa
graphs = counters["stats"]["unique_graphs"]
diff = rel(outs[0], eager)
check(graphs == 1, "Wan compiled with vcattn.sdpa patched in: %d graphs" % graphs)
check(diff < (2e-3 if device == "cpu" else 1e-2), "Wan compiled vs eager, patched: relative difference %.2e" % diff)
print("Wan compiled (fullgraph) with vcattn.sdpa patched in: %d graph over two steps, compiled vs eager %.1e"
      % (graphs, diff))

flux = rand_init(diffusers.FluxTransformer2DModel(
    patch_size=1, in_channels=8, num_layers=1, num_single_layers=1, attention_head_dim=16,
    num_attention_heads=2, joint_attention_dim=16, pooled_projection_dim=8, axes_dims_rope=(4, 6, 6)))
img_ids = torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(16.0), torch.arange(16.0), indexing="ij"),
                      -1).reshape(-1, 3).to(device)
flux_args = dict(hidden_states=torch.randn(1, 256, 8, device=device, dtype=dtype),
                 encoder_hidden_states=torch.randn(1, 6, 16, device=device, dtype=dtype),
                 pooled_projections=torch.randn(1, 8, device=device, dtype=dtype),
                 timestep=torch.tensor([0.5], device=device), img_ids=img_ids,
                 txt_ids=torch.zeros(6, 3, device=device), return_dict=False)
run("Flux", lambda: flux(**flux_args)[0], True)

gpt2 = rand_init(transformers.GPT2Model(transformers.GPT2Config(
    n_layer=2, n_head=2, n_embd=128, vocab_size=100, n_positions=64, bos_token_id=0, eos_token_id=0,
    attn_implementation="sdpa")))
tokens = torch.randint(0, 100, (2, 48), device=device)
run("GPT-2 (causal)", lambda: gpt2(input_ids=tokens).last_hidden_state, False)

bert = rand_init(transformers.BertModel(transformers.BertConfig(
    num_hidden_layers=2, num_attention_heads=2, hidden_size=128, intermediate_size=256, vocab_size=100,
    max_position_embeddings=64, attn_implementation="sdpa"), add_pooling_layer=False))
padding = torch.ones(2, 48, dtype=torch.long, device=device)
padding[1, 30:] = 0
run("BERT (padding mask)", lambda: bert(input_ids=tokens, attention_mask=padding).last_hidden_state, False)

finish("test_sdpa_patch (%s)" % device)
