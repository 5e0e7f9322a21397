"""The Python front on the GPU (run on the device; exits 77 without CUDA):
CUDA tensors give the C API's bits, run on the current stream and device,
give the sequential bits from two threads on two streams, survive
torch.compile(fullgraph=True), replay from a CUDA graph (drop-in calls; the
others are refused while capturing), pad small head dims, reject CPU/CUDA
mixes, keep the schedule's grouping on the GPU, give a varlen pack the
bits of one call per sequence, and take per-head RoPE tables."""
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import check, finish, require_cuda  # noqa: E402

torch = require_cuda("test_python_gpu")
import vcattn  # noqa: E402

torch.manual_seed(0)
q, k, v = (torch.randn(2, 8, 1000, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
k = k + 0.5
ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


out, lse = vcattn.attention(q, k, v, return_lse=True)
check(out.is_cuda and out.dtype == torch.bfloat16 and lse.shape == (2, 8, 1000), "output placement/shape")
check(rel(out, ref) < 0.06, "vc error %.4f" % rel(out, ref))
scores = (q.float() @ k.float().transpose(-1, -2)) * 128 ** -0.5
check((lse - torch.logsumexp(scores, -1)).abs().max().item() < 0.05, "LSE convention")
# Without a state the backends' token orders agree to rounding only (a few
# tokens change block), so the CPU backend is compared by its error here;
# test_cuda compares the two bit for bit in one order.
cpu_out, cpu_lse = vcattn.attention(q.cpu(), k.cpu(), v.cpu(), return_lse=True)
err_gpu, err_cpu = rel(out, ref), rel(cpu_out, ref.cpu())
check(abs(err_gpu - err_cpu) < 0.05 * err_cpu, "GPU vs CPU backend error %.4f vs %.4f" % (err_gpu, err_cpu))
check(torch.equal(vcattn.attention(q, k, v), out), "repeated GPU calls differ")

stream = torch.cuda.Stream()
with torch.cuda.stream(stream):
    out_s = vcattn.attention(q, k, v, check_finite=False)
stream.synchronize()
check(torch.equal(out_s, out), "side stream result differs")

# Two host threads, each with its own stream (and so its own context), run
# layer schedules at the same time: the same bits as one after the other.
def schedule(method, offset, results, key):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.default_stream())
    with torch.cuda.stream(stream):
        steps = vcattn.Schedule(num_inference_steps=40)
        layer = steps.layer("attn")
        outs = []
        for step in range(3):
            steps.step = step
            outs.append(vcattn.attention(q, k + offset, v - offset, method=method, state=layer))
    stream.synchronize()
    results[key] = outs


sequential, concurrent = {}, {}
for i, method in enumerate(("vc", "sage2")):
    schedule(method, 0.25 * i, sequential, i)
threads = [threading.Thread(target=schedule, args=(m, 0.25 * i, concurrent, i))
           for i, m in enumerate(("vc", "sage2"))]
for t in threads:
    t.start()
for t in threads:
    t.join()
check(all(torch.equal(a, b) for i in range(2) for a, b in zip(sequential[i], concurrent.get(i, []))) and
      len(concurrent) == 2, "two threads on two streams differ from sequential calls")

compiled = torch.compile(lambda a, b, c: vcattn.attention(a, b, c) + 1, fullgraph=True)
check(torch.equal(compiled(q, k, v), out + 1), "torch.compile(fullgraph=True) differs")

# CUDA graphs: a drop-in call without the finite check is captured and replayed
# with the eager bits; the finite check and layer states are refused while
# capturing, with the reason (they need the host).
graph_in = [t.clone() for t in (q, k, v)]
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):  # warm-up outside the capture, as torch.cuda.graph wants
    vcattn.attention(*graph_in, check_finite=False)
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(graph):
        graph_out = vcattn.attention(*graph_in, check_finite=False)
    graph.replay()
    torch.cuda.synchronize()
    check(torch.equal(graph_out, out), "a CUDA graph replay of the drop-in call differs from the eager call")
    for dst, src in zip(graph_in, (k, v, q)):  # new inputs in place: the replay follows them
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    check(torch.equal(graph_out, vcattn.attention(k, v, q)), "a replay on new inputs differs from the eager call")
except Exception as e:
    check(False, "CUDA graph capture of a drop-in call: %s: %s" % (type(e).__name__, e))
for label, kwargs in (("check_finite", {}), ("a layer state", dict(check_finite=False,
                                                                    state=vcattn.LayerState(4)))):
    try:
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            vcattn.attention(*graph_in, **kwargs)
        check(False, "%s accepted while capturing a CUDA graph" % label)
    except ValueError as e:
        check("CUDA graph" in str(e), "%s while capturing: %s" % (label, e))
    except Exception as e:
        check(False, "%s while capturing: %s: %s" % (label, type(e).__name__, e))
torch.cuda.synchronize()

q96, k96, v96 = (t[..., :96].contiguous() for t in (q, k, v))
ref96 = torch.nn.functional.scaled_dot_product_attention(q96.float(), k96.float(), v96.float())
out96 = vcattn.attention(q96, k96, v96)
check(out96.shape[-1] == 96 and rel(out96, ref96) < 0.06, "head dim 96 (padded) error %.4f" % rel(out96, ref96))
try:
    vcattn.attention(q, k.cpu(), v)
    check(False, "CPU k with CUDA q accepted")
except ValueError as e:
    check("different devices" in str(e), str(e))

steps = vcattn.Schedule(num_inference_steps=40)
layer = steps.layer("attn")
o0 = vcattn.attention(q, k, v, state=layer)
steps.step = 1
o1 = vcattn.attention(q, k, v, state=layer)  # reuses the step-0 permutation
check(torch.equal(o0, o1), "reused permutation gives other bits than the grouping step")

# the length rule of the SDPA-compatible entry points: a short CUDA call runs
# torch SDPA (its exact result), counted; with the rule off, vcattn
sq, sk, sv = (torch.randn(1, 4, 512, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
before = vcattn.set_sdpa_below_keys(1024)
routes0 = dict(vcattn.sdpa_routes)
check(torch.equal(vcattn.sdpa(sq, sk, sv), torch.nn.functional.scaled_dot_product_attention(sq, sk, sv)) and
      vcattn.sdpa_routes["sdpa:short"] == routes0.get("sdpa:short", 0) + 1, "length rule: a short call not on SDPA")
vcattn.set_sdpa_below_keys(0)
check(torch.equal(vcattn.sdpa(sq, sk, sv), vcattn.attention(sq, sk, sv)) and
      vcattn.sdpa_routes["vcattn"] == routes0.get("vcattn", 0) + 1, "length rule off: not vcattn's call")
vcattn.set_sdpa_below_keys(before)

# varlen on the GPU: packed sequences of different lengths (GQA, D 128 and a
# padded 96), each the same bits as its own call, other key lengths too
lens = [300, 1031, 77]
cu = torch.tensor([0, 300, 1331, 1408], dtype=torch.int32, device="cuda")
cu_k = torch.tensor([0, 500, 1200, 1408], dtype=torch.int64, device="cuda")
for d in (128, 96):
    vq = torch.randn(1408, 8, d, device="cuda", dtype=torch.bfloat16)
    vk, vv = (torch.randn(1408, 2, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for cuk in (cu, cu_k):
        packed = vcattn.attention_varlen(vq, vk, vv, cu, cuk)
        qb, kb = cu.tolist(), cuk.tolist()
        alone = [vcattn.attention(vq[None, qb[i]:qb[i + 1]], vk[None, kb[i]:kb[i + 1]], vv[None, kb[i]:kb[i + 1]],
                                  tensor_layout="NHD")[0] for i in range(len(lens))]
        check(packed.is_cuda and packed.shape == vq.shape and torch.equal(packed, torch.cat(alone)),
              "varlen on the GPU (D %d, %s key lengths) differs from one call per sequence"
              % (d, "same" if cuk is cu else "other"))

# RoPE inside the quantizers, per-head tables [B, H, N, D/2] (LTX-Video's form): a table shared by expanding
# gives the bits of the [N, D/2] table; a strided view the bits of its contiguous copy; the result is as close
# to exact attention on the rotated inputs as without RoPE; the same under torch.compile
angles = torch.rand(2, 1000, 8, 64, device="cuda") * 6.3  # [B, N, H, D/2]
hcos, hsin = angles.cos().transpose(1, 2), angles.sin().transpose(1, 2)
flat_cos, flat_sin = hcos[0, 0], hsin[0, 0]
shared = vcattn.attention(q, k, v, rope=(flat_cos, flat_sin))
check(torch.equal(vcattn.attention(q, k, v, rope=(flat_cos.expand(2, 8, 1000, 64), flat_sin.expand(2, 8, 1000, 64))),
                  shared), "expanded per-head tables differ from the [N, D/2] table")
per_head = vcattn.attention(q, k, v, rope=(hcos, hsin))
check(torch.equal(vcattn.attention(q, k, v, rope=(hcos.contiguous(), hsin.contiguous())), per_head),
      "strided per-head tables differ from their contiguous copy")


def rotated(x, c, s):
    a, b = x.float()[..., 0::2], x.float()[..., 1::2]
    return torch.stack((a * c - b * s, a * s + b * c), -1).flatten(-2)


rq, rk = rotated(q, hcos, hsin), rotated(k, hcos, hsin)
rope_ref = torch.nn.functional.scaled_dot_product_attention(rq, rk, v.float())
check(rel(per_head, rope_ref) < 0.06 and not torch.equal(per_head, shared),
      "per-head RoPE error %.4f against exact attention on the rotated inputs" % rel(per_head, rope_ref))
# a head dim the GPU pads (96 -> 128): interleaved pairs stay pairs, and for the pairs (i, i + D/2) each half
# is padded on its own
q96, k96, v96 = (t[..., :96].contiguous() for t in (q, k, v))
c96, s96 = hcos[..., :48], hsin[..., :48]
for style in ("interleaved", "half"):
    if style == "half":
        a, b = (q96.float()[..., :48], q96.float()[..., 48:]), (k96.float()[..., :48], k96.float()[..., 48:])
        rq96, rk96 = (torch.cat((x1 * c96 - x2 * s96, x1 * s96 + x2 * c96), -1) for x1, x2 in (a, b))
    else:
        rq96, rk96 = rotated(q96, c96, s96), rotated(k96, c96, s96)
    ref96 = torch.nn.functional.scaled_dot_product_attention(rq96, rk96, v96.float())
    got96 = vcattn.attention(q96, k96, v96, rope=(c96, s96), rope_style=style)
    check(got96.shape[-1] == 96 and rel(got96, ref96) < 0.06,
          "rope %s at head dim 96 (padded): error %.4f" % (style, rel(got96, ref96)))
compiled_rope = torch.compile(lambda *a: vcattn.attention(*a[:3], rope=a[3:]) + 1, fullgraph=True)
check(torch.equal(compiled_rope(q, k, v, hcos, hsin), per_head + 1), "per-head RoPE under torch.compile differs")

finish("test_python_gpu")
