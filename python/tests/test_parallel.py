"""vcattn inside an existing sequence-parallel engine (issue 8, what one
machine allows): yunchang's USP layer (LongContextAttention) on two
processes over gloo, once as Ulysses (all-to-all over heads) and once as a
ring (key chunks merged through the LSE), with vcattn as its attention.
Ulysses with sage2 must give the single call's bits (each rank runs whole
heads); the ring, and vc with its per-rank grouping, must stay within the
single call's error to FP64. Exits 77 without torch or yunchang."""
import os
import sys
import warnings

warnings.filterwarnings("ignore", category=FutureWarning)  # yunchang's torch.jit.script

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import check, finish, leave_rank, run_ranks, skip  # noqa: E402

try:
    import torch
    import torch.distributed as dist
    import yunchang
except ImportError as e:
    skip("test_parallel", e)

WORLD = 2
B, S, H, D = 1, 640, 4, 64  # S / 2 = 320 tokens per rank: a tail tile on every chunk


def inputs():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(B, S, H, D, generator=g) for _ in range(3))
    k += 0.5
    v[:, ::97] *= 6.0  # a few outlier tokens, so grouping matters
    return q, k, v


def worker(rank, path, ulysses, ring, method):
    import vcattn.parallel
    dist.init_process_group("gloo", init_method="file://" + path, rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    yunchang.set_seq_parallel_pg(ulysses, ring, rank, WORLD)
    attn = yunchang.LongContextAttention(attn_type=None, attn_processor=vcattn.parallel.yunchang_processor(method))
    q, k, v = inputs()
    part = slice(rank * S // WORLD, (rank + 1) * S // WORLD)
    out = attn(q[:, part].contiguous(), k[:, part].contiguous(), v[:, part].contiguous())
    gathered = [torch.empty_like(out) for _ in range(WORLD)]
    dist.all_gather(gathered, out.contiguous())
    if rank == 0:
        torch.save(torch.cat(gathered, 1), path + ".out")
    dist.barrier()
    dist.destroy_process_group()
    leave_rank()


def main():
    import vcattn
    q, k, v = inputs()
    ref = torch.nn.functional.scaled_dot_product_attention(*(t.double().transpose(1, 2) for t in (q, k, v)))
    ref = ref.transpose(1, 2)

    def err(o):
        return ((o.double() - ref).norm() / ref.norm()).item()
    for method in ("sage2", "vc"):
        single = vcattn.attention(q, k, v, tensor_layout="NHD", method=method)
        for ulysses, ring, name in ((2, 1, "ulysses"), (1, 2, "ring")):
            out = run_ranks(worker, WORLD, ulysses, ring, method)
            print("%-7s %-5s error %.4e (single call %.4e)" % (name, method, err(out), err(single)))
            check(out.shape == single.shape and not out.isnan().any(), "%s %s: shape or NaN" % (name, method))
            if name == "ulysses" and method == "sage2":
                check(torch.equal(out, single), "ulysses sage2: not the single call's bits")
            check(err(out) <= 1.25 * err(single) + 1e-4, "%s %s: error %.4e against the single call's %.4e"
                  % (name, method, err(out), err(single)))
    finish("test_parallel")


if __name__ == "__main__":
    main()
