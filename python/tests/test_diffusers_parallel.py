"""vcattn's diffusers backend under diffusers' own context parallelism, on two
processes over gloo: the backend called as diffusers' dispatcher calls it,
with a ParallelConfig whose mesh is Ulysses (all-to-all over heads) or a
ring (key chunks merged through the LSE). Ulysses must give the single
call's bits (each rank runs whole heads over the whole sequence); the ring
must stay within the single call's error to FP64. A whole tiny Wan under
transformer.enable_parallelism likewise. Also: RoPE tables of the
rank's own tokens (the fused processors' route), a key-padding mask (sent to
diffusers' native backend, which runs Ulysses itself), and the registry says
the backends support context parallelism. VCATTN_TEST_DEVICE=cuda runs the
same on two GPUs over NCCL (exits 77 with fewer). Exits 77 without torch or
diffusers."""
import os
import sys
import warnings

warnings.filterwarnings("ignore", category=FutureWarning)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import check, finish, leave_rank, run_ranks, skip, test_device  # noqa: E402

try:
    import torch
    import torch.distributed as dist
    from diffusers.models import attention_dispatch  # noqa: F401
    from diffusers.models._modeling_parallel import ContextParallelConfig, ParallelConfig
except ImportError as e:
    skip("test_diffusers_parallel", e)

WORLD = 2
DEVICE = test_device("test_diffusers_parallel")
if DEVICE == "cuda" and torch.cuda.device_count() < WORLD:
    skip("test_diffusers_parallel", "needs %d CUDA devices, found %d" % (WORLD, torch.cuda.device_count()))
B, S, H, D = 1, 640, 4, 64  # S / 2 = 320 tokens per rank: a tail tile on every chunk


def inputs(device):
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(B, S, H, D, generator=g) for _ in range(3))
    k += 0.5
    v[:, ::97] *= 6.0
    angles = torch.rand(S, D // 2, generator=g) * 6.283
    mask = torch.ones(B, S, dtype=torch.bool)
    mask[:, -40:] = False  # padded keys at the end of the second rank's shard
    dtype = torch.bfloat16 if device != "cpu" else torch.float32
    q, k, v = (t.to(device, dtype) for t in (q, k, v))
    return q, k, v, (angles.cos().to(device), angles.sin().to(device)), mask.to(device)


def wan(device):
    from diffusers import WanTransformer3DModel
    torch.manual_seed(0)
    return WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=64,
                                 in_channels=16, out_channels=16, text_dim=32, freq_dim=32, ffn_dim=64,
                                 num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                 rope_max_seq_len=32).eval().to(device)


def forward(model, device):
    g = torch.Generator().manual_seed(1)
    x, text = torch.randn(1, 16, 4, 16, 16, generator=g), torch.randn(1, 12, 32, generator=g)
    with torch.no_grad():  # 4 x 8 x 8 = 256 tokens, 128 a rank
        return model(x.to(device), timestep=torch.tensor([999], device=device),
                     encoder_hidden_states=text.to(device), return_dict=False)[0]


def worker(rank, path, ulysses, ring):
    import vcattn.diffusers as vd
    from torch.distributed.device_mesh import init_device_mesh
    device = "cuda:%d" % rank if DEVICE == "cuda" else "cpu"
    if DEVICE == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if DEVICE == "cuda" else "gloo", init_method="file://" + path, rank=rank,
                            world_size=WORLD)
    torch.set_num_threads(1)
    cp = ContextParallelConfig(ring_degree=ring, ulysses_degree=ulysses)
    cp.setup(rank, WORLD, torch.device(device),
             init_device_mesh(DEVICE, (ring, ulysses), mesh_dim_names=("ring", "ulysses")))
    config = ParallelConfig(context_parallel_config=cp)
    q, k, v, (cos, sin), mask = inputs(device)
    part = slice(rank * S // WORLD, (rank + 1) * S // WORLD)
    ql, kl, vl = (t[:, part].contiguous() for t in (q, k, v))
    results = {"plain": vd.attention_backend(ql, kl, vl, _parallel_config=config),
               "rope": vd._route(False, ql, kl, vl, None, 0.0, False, None, False, False, config,
                                 rope=(cos[part], sin[part]))}
    if ring == 1:  # diffusers' native backend (the masked route) has no ring
        results["mask"] = vd.attention_backend(ql, kl, vl, attn_mask=mask[:, part].contiguous(),
                                               _parallel_config=config)
    results["routes"] = dict(vd.stats)
    gathered = {}
    for name, out in results.items():
        if name == "routes":
            continue
        parts = [torch.empty_like(out) for _ in range(WORLD)]
        dist.all_gather(parts, out.contiguous())
        gathered[name] = torch.cat(parts, 1)
    # a whole tiny Wan under transformer.enable_parallelism (diffusers splits and gathers the sequence): with
    # the backend by name, and as vcattn's set_backend installs it (fused RoPE, the schedule's backend)
    if DEVICE == "cpu":
        torch.accelerator.device_count = lambda: 1  # a CPU build has none; diffusers places rank r on r % count
    for name, install in (("model", lambda m: m.set_attention_backend("vcattn")),
                          ("model, set_backend", lambda m: vd.set_backend(m, num_inference_steps=4))):
        m = wan(device)
        handle = install(m)
        m.enable_parallelism(config=ParallelConfig(context_parallel_config=ContextParallelConfig(
            ring_degree=ring, ulysses_degree=ulysses)))
        n0 = vd.stats["vcattn"]
        gathered[name] = forward(m, device)
        gathered[name + " processor"] = type(m.blocks[0].attn1.processor).__name__
        gathered[name + " calls"] = vd.stats["vcattn"] - n0
        gathered[name + " groupings"] = len(handle.groupings) if handle is not None else 0
    if rank == 0:
        gathered = {name: x.cpu() if isinstance(x, torch.Tensor) else x for name, x in gathered.items()}
        gathered["routes"] = results["routes"]
        torch.save(gathered, path + ".out")
    dist.barrier()
    dist.destroy_process_group()
    leave_rank()


def err(o, ref):
    return ((o.double() - ref).norm() / ref.norm()).item()


def rotate(x, cos, sin):
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), -1).flatten(-2)


def main():
    import vcattn.diffusers as vd
    member = vd.register()
    registry = attention_dispatch._AttentionBackendRegistry
    check(registry._is_context_parallel_available(member) and
          registry._is_context_parallel_available(vd._schedule_member()),
          "the registry does not list vcattn's backends as supporting context parallelism")
    q, k, v, (cos, sin), mask = inputs(DEVICE)

    def reference(q, k, key_mask=None):
        bias = None if key_mask is None else torch.where(key_mask, 0.0, float("-inf")).double()[:, None, None, :]
        out = torch.nn.functional.scaled_dot_product_attention(
            *(t.double().transpose(1, 2) for t in (q, k, v)), attn_mask=bias)
        return out.transpose(1, 2)

    ref_plain, ref_rope = reference(q, k), reference(rotate(q.float(), cos, sin), rotate(k.float(), cos, sin))
    single = vd.attention_backend(q, k, v)
    single_rope = vd._route(False, q, k, v, None, 0.0, False, None, False, False, None, rope=(cos, sin))
    ref_mask = reference(q, k, mask)
    model = wan(DEVICE)
    model_ref = forward(model, DEVICE)  # diffusers' native backend
    model.set_attention_backend("vcattn")
    model_single = forward(model, DEVICE)
    model.reset_attention_backend()
    vd.set_backend(model, num_inference_steps=4)
    model_grouped = forward(model, DEVICE)  # one process, a grouping step (k-means) in each layer
    vd.disable(model)
    # the ranks' results come back on the CPU
    ref_plain, ref_rope, ref_mask, single, single_rope, model_ref, model_single, model_grouped = (
        t.cpu() for t in (ref_plain, ref_rope, ref_mask, single, single_rope, model_ref, model_single,
                          model_grouped))
    model_err = max(err(model_single, model_ref.double()), err(model_grouped, model_ref.double()))
    sdpa_tol = 1e-5 if q.dtype == torch.float32 else 1e-2  # diffusers' native backend in q's dtype
    for ulysses, ring, name in ((2, 1, "ulysses"), (1, 2, "ring")):
        out = run_ranks(worker, WORLD, ulysses, ring)
        routes = out.pop("routes")
        for case in ("model", "model, set_backend"):
            o, processor, calls = out.pop(case), out.pop(case + " processor"), out.pop(case + " calls")
            groupings = out.pop(case + " groupings")
            # set_backend's layers group: a state per call of the forward (a block's, and under a ring a
            # block's per key chunk)
            want = 2 * ring if case != "model" else 0
            check(groupings == want, "%s %s: %d grouping calls on rank 0, expected %d" % (name, case, groupings, want))
            check(calls == 2 * ring,  # a call a block, once per key chunk under a ring
                  "%s %s: %d vcattn calls on rank 0 (two blocks)" % (name, case, calls))
            check(processor == ("WanRopeProcessor" if case != "model" else "WanAttnProcessor"),
                  "%s %s: the processor is %s" % (name, case, processor))
            check(o.shape == model_single.shape and not o.isnan().any(), "%s %s: shape or NaN" % (name, case))
            print("%-7s %-18s error %.4e to diffusers' native backend (one process: %.4e drop-in, %.4e grouped)"
                  % (name, case, err(o, model_ref.double()), err(model_single, model_ref.double()),
                     err(model_grouped, model_ref.double())))
            if name == "ulysses" and case == "model" and DEVICE == "cpu":  # (cuBLAS may pick other kernels
                # for a rank's half of the tokens in the layers around the attention)
                check(torch.equal(o, model_single), "ulysses, a whole model: not the single process's bits")
            check(err(o, model_ref.double()) <= 1.25 * model_err + 1e-4,
                  "%s %s: %.4e from the native backend's output, one process %.4e"
                  % (name, case, err(o, model_ref.double()), model_err))
        for case, o in out.items():
            check(o.shape == single.shape and not o.isnan().any(), "%s %s: shape or NaN" % (name, case))
        print("%-7s error %.4e (single call %.4e); with RoPE %.4e (single %.4e); routes %s"
              % (name, err(out["plain"], ref_plain), err(single, ref_plain), err(out["rope"], ref_rope),
                 err(single_rope, ref_rope), routes))
        check(routes.get("vcattn", 0) >= (2 if ring == 1 else 4),
              "%s: the rank's calls did not run on vcattn (routes %s)" % (name, routes))
        if name == "ulysses":
            check(torch.equal(out["plain"], single), "ulysses: not the single call's bits")
            check(err(out["mask"], ref_mask) < sdpa_tol,
                  "ulysses with a key-padding mask: %.3e from FP64 (diffusers' native backend)"
                  % err(out["mask"], ref_mask))
        check(err(out["plain"], ref_plain) <= 1.25 * err(single, ref_plain) + 1e-4,
              "%s: error %.4e against the single call's %.4e" % (name, err(out["plain"], ref_plain),
                                                                err(single, ref_plain)))
        check(err(out["rope"], ref_rope) <= 1.25 * err(single_rope, ref_rope) + 1e-4,
              "%s with RoPE: error %.4e against the single call's %.4e"
              % (name, err(out["rope"], ref_rope), err(single_rope, ref_rope)))
    finish("test_diffusers_parallel")


if __name__ == "__main__":
    main()
