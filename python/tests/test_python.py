"""The Python front on the CPU: numpy and (when installed) torch CPU tensors.
Run by ctest (`make test`); exits 77 (skipped) without numpy. GPU behaviour is
tested on the device by python/tests/test_python_gpu.py."""
import ctypes
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import numpy as np
except ImportError:
    print("test_python: SKIPPED, numpy is not installed")
    sys.exit(77)

import vcattn  # noqa: E402
from harness import check, finish, raises  # noqa: E402

rng = np.random.default_rng(0)


def qkv(b=1, hq=2, hkv=2, nq=200, nk=300, d=64, dtype=np.float32):
    q = rng.standard_normal((b, hq, nq, d)).astype(dtype)
    k = (rng.standard_normal((b, hkv, nk, d)) + 0.5).astype(dtype)
    v = rng.standard_normal((b, hkv, nk, d)).astype(dtype)
    return q, k, v


def reference(q, k, v, scale=None):
    """float64 softmax attention [B, H, N, D] with GQA, and its LSE."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) * (scale or q.shape[-1] ** -0.5)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    return (p @ v) / p.sum(-1, keepdims=True), (m[..., 0] + np.log(p.sum(-1)))


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# ---- numpy: fidelity, LSE, layouts, GQA, inputs untouched --------------------
q, k, v = qkv(hq=4, hkv=2)
copies = [x.copy() for x in (q, k, v)]
ref, ref_lse = reference(q, k, v)
for method, tol in (("bf16", 3e-3), ("sage2", 0.06), ("vc", 0.06)):
    out, lse = vcattn.attention(q, k, v, method=method, return_lse=True)
    check(out.shape == q.shape and lse.shape == (1, 4, 200), "%s: shapes %s %s" % (method, out.shape, lse.shape))
    check(rel(out, ref) < tol, "%s: rel error %.3g >= %g" % (method, rel(out, ref), tol))
    check(np.abs(lse - ref_lse).max() < 0.05, "%s: LSE off by %.3g" % (method, np.abs(lse - ref_lse).max()))
check(all(np.array_equal(a, b) for a, b in zip(copies, (q, k, v))), "inputs were modified")
nhd = [np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v)]
out_hnd = vcattn.attention(q, k, v)
out_nhd = vcattn.attention(*nhd, tensor_layout="NHD")
check(np.array_equal(out_nhd.transpose(0, 2, 1, 3), out_hnd), "NHD and HND outputs differ")
out_scaled = vcattn.attention(q, k, v, method="bf16", sm_scale=0.05)
check(rel(out_scaled, reference(q, k, v, 0.05)[0]) < 3e-3, "sm_scale not applied")
q16, k16, v16 = (x.astype(np.float16) for x in (q, k, v))
check(rel(vcattn.attention(q16, k16, v16).astype(np.float32), ref) < 0.06, "float16 numpy")

# ---- method switches, config=, the scale alias ------------------------------------
out_h = vcattn.attention(q, k, v, method="vc+hadamard")
check(np.array_equal(vcattn.attention(q, k, v, method="vc", hadamard=1), out_h), "hadamard=1 keyword")
check(np.array_equal(vcattn.attention(q, k, v, config=vcattn.config("vc+hadamard")), out_h), "config= Config")
check(np.array_equal(vcattn.attention(q, k, v, config={"hadamard": 1}), out_h), "config= mapping")
check(rel(vcattn.attention(q, k, v, method="vc", sink_guard=0.9), ref) < 0.06, "sink_guard keyword")
# 200 keys: vc takes exp then the cast (as vsmooth with vc's probe) unless ExpCast is forced
vc_cfg = vcattn.config("vc")
check(np.array_equal(vcattn.attention(q, k, v), vcattn.attention(
    q, k, v, method="vsmooth", vsmooth_probe_rows=vc_cfg.vsmooth_probe_rows,
    vsmooth_order_rows=vc_cfg.vsmooth_order_rows)), "vc below expcast_min_keys equals vsmooth")
out_ec = vcattn.attention(q, k, v, expcast_min_keys=0)
check(not np.array_equal(out_ec, out_hnd) and rel(out_ec, ref) < 0.06, "expcast_min_keys=0 keyword")
check(np.array_equal(vcattn.attention(q, k, v, method="bf16", scale=0.05), out_scaled), "scale alias")
check(np.array_equal(vcattn.attention(q, k, v, config=vcattn.config("bf16", sm_scale=0.05)), out_scaled),
      "sm_scale from config=")
raises(ValueError, lambda: vcattn.attention(q, k, v, sm_scale=0.1, scale=0.2), "alias", "scale disagrees")
raises(TypeError, lambda: vcattn.attention(q, k, v, hadamrd=1), "hadamrd", "misspelt switch")
raises(TypeError, lambda: vcattn.attention(q, k, v, hadamard="yes"), "integer", "switch type")
raises(TypeError, lambda: vcattn.attention(q, k, v, config=3), "config must be", "config type")
raises(TypeError, lambda: vcattn.attention(q, k, v, dropout_p=0.1), "inference only", "dropout")
raises(ValueError, lambda: vcattn.attention(q, k, v, kmeans_iters=-1), "config", "field out of range")
out_probe = vcattn.attention(q, k, v, vsmooth_probe_rows=64)
check(rel(out_probe, ref) < 0.06 and np.array_equal(out_probe, vcattn.attention(q, k, v, vsmooth_probe_rows=64)),
      "vsmooth_probe_rows keyword: faithful and deterministic")
raises(ValueError, lambda: vcattn.attention(q, k, v, vsmooth_probe_rows=257), "vsmooth_probe_rows", "probe rows out of range")

# ---- a library whose vcattn_config differs from the package's is refused ---------
from vcattn import _capi  # noqa: E402

mirror = _capi.Config
_capi.Config = type("Config", (ctypes.Structure,), {"_fields_": mirror._fields_ + [("extra", ctypes.c_double)]})
try:
    raises(OSError, lambda: _capi.load(_capi.find_library()), "different versions", "config size mismatch")
finally:
    _capi.Config = mirror

# ---- python -m vcattn, py.typed -------------------------------------------------
import subprocess  # noqa: E402
env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
about = subprocess.run([sys.executable, "-m", "vcattn"], capture_output=True, text=True, env=env)
check(about.returncode == 0 and "cpu backend: available" in about.stdout and "cuda backend:" in about.stdout and
      "attention probe on %d query rows" % vc_cfg.vsmooth_probe_rows in about.stdout and
      "on %d rows at grouping steps" % vc_cfg.vsmooth_order_rows in about.stdout,
      "python -m vcattn: rc %d, %r" % (about.returncode, about.stdout + about.stderr))
check(os.path.exists(os.path.join(os.path.dirname(vcattn.__file__), "py.typed")), "py.typed")

# ---- the benchmarks where they cannot run: one line, no traceback ----------------
bench = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
try:
    import torch as _torch
    gpu_here = _torch.cuda.is_available()
except ImportError:
    gpu_here = False
if gpu_here:
    print("test_python: a GPU is here, so the benchmarks' no-GPU exit is not checked")
else:
    for script in ("bench_attention.py", "bench_grouping.py", "profile_call.py", "bench_preprocess.py",
                   "bench_transformer.py"):
        r = subprocess.run([sys.executable, os.path.join(bench, script)], capture_output=True, text=True, env=env)
        lines = r.stderr.strip().splitlines()
        check(r.returncode != 0 and len(lines) == 1 and "needs" in lines[0] and not r.stdout,
              "%s without a GPU: rc %d, stdout %r, stderr %r" % (script, r.returncode, r.stdout, r.stderr))

# ---- bad input ----------------------------------------------------------------
raises(NotImplementedError, lambda: vcattn.attention(q, k, v, is_causal=True), "causal", "is_causal")
raises(ValueError, lambda: vcattn.attention(q, k, v, tensor_layout="BHSD"), "tensor_layout", "layout")
raises(ValueError, lambda: vcattn.attention(q, k[:, :, :10], v), "shapes disagree", "shape mismatch")
raises(ValueError, lambda: vcattn.attention(q[:, :3], k, v), "multiple of key/value heads", "GQA")
raises(ValueError, lambda: vcattn.attention(q, k, v, method="fp16"), "unknown method", "method")
raises(ValueError, lambda: vcattn.attention(q, k, v, sm_scale=-1.0), "sm_scale", "sm_scale")
raises(ValueError, lambda: vcattn.attention(q.astype(np.float64), k, v), "dtype", "float64")
raises(ValueError, lambda: vcattn.attention(q[0], k, v), "4-D", "3-D input")
raises(ValueError, lambda: vcattn.attention(q, k, v[0]), "v must be 4-D", "3-D v")
raises(ValueError, lambda: vcattn.attention(q[:, :, :0], k, v), "q is empty", "a zero size")
raises(TypeError, lambda: vcattn.attention(q.tolist(), k, v), "torch tensor or a numpy array", "a list for q")
raises(ValueError, lambda: vcattn.attention(q, k[:, :, :10], v, tensor_layout="NHD"), "shapes disagree",
       "shape mismatch read as [B, N, H, D]")
raises(TypeError, lambda: vcattn.attention(q, k, v, attn_mask=np.ones((200, 300))), "attn_mask", "mask")
raises(TypeError, lambda: vcattn.attention(q, k, v, state=object()), "LayerState", "state type")
check(np.array_equal(vcattn.attention(q, k, v, attn_mask=None, dropout_p=0.0, enable_gqa=True),
                     vcattn.attention(q, k, v)), "harmless SDPA keywords (attn_mask=None, dropout_p=0, enable_gqa)")
# values ctypes would narrow silently, and inputs that once got messages about something else
raises(ValueError, lambda: vcattn.attention(q, k, v, kmeans_clusters=2 ** 32 + 3), "C type's range",
       "an integer past 32 bits (became 3)")
raises(ValueError, lambda: vcattn.attention(q, k, v, kmeans_seed=-1), "C type's range", "a negative seed")
raises(ValueError, lambda: vcattn.attention(q, k, v, sm_scale=1e-50), "float32", "a scale float32 rounds to 0 "
       "(0 means the default)")
raises(ValueError, lambda: vcattn.attention(q, k, v, sink_guard=1e-50), "float32", "a switch float32 rounds to 0")
raises(ValueError, lambda: vcattn.attention(q[:, :, :0], k, v), "empty", "an empty q")
raises(TypeError, lambda: vcattn.attention(q.tolist(), k, v), "numpy array", "a list for q")
byte_view = np.ndarray(q.shape, dtype=np.float32, buffer=np.zeros(q.nbytes + 64, np.uint8),
                       strides=(q.strides[0] + 2,) + q.strides[1:])
raises(ValueError, lambda: vcattn.attention(byte_view, byte_view, byte_view), "multiples",
       "strides that are not multiples of the item size (read at the wrong addresses)")
bad = v.copy()
bad[0, 1, 7, 3] = np.nan
raises(ValueError, lambda: vcattn.attention(q, k, bad), "NaN", "NaN input")

# ---- the schedule and its layers -------- ------------------------------------------
s = vcattn.Schedule(num_inference_steps=8)
layer = s.layer("block0")
check(s.layer("block0") is layer and len(s) == 1, "layers are per key")
check(layer.plan() == "cold", "step 0 plans a cold grouping, got %s" % layer.plan())
vcattn.attention(q, k, v, state=layer)
plans = []
for step in range(1, 8):
    s.step = step
    plans.append(layer.plan())
    vcattn.attention(q, k, v, state=layer)
# window = ceil(0.25 * 8) = 2 steps: step 1 reuses; afterwards plain (paper default)
check(plans == ["reuse"] + ["none"] * 6, "schedule over 8 steps: %s" % plans)
check(s.layer("block1").step == 7, "a new layer joins at the schedule's step")
raises(ValueError, lambda: setattr(s, "step", 8), "outside", "step past the end")
raises(ValueError, s.next_step, "outside", "next_step past the end")
raises(ValueError, lambda: vcattn.Schedule(0), "num_inference_steps", "zero steps")

# ---- the drop-in call: V-Smooth in the principal order, no k-means ---------------
drop = vcattn.attention(q, k, v)
# k-means for every head (by default each key head may take the principal order instead)
grouped = vcattn.attention(q, k, v, state=vcattn.Schedule(num_inference_steps=1).layer("once"), vsmooth_order_rows=0)
plain = vcattn.attention(q, k, v, vsmooth=0)
check(np.array_equal(drop, vcattn.attention(q, k, v)), "the drop-in call is deterministic")
check(not np.array_equal(drop, grouped) and not np.array_equal(drop, plain),
      "the drop-in call groups along the principal direction: neither the k-means grouping nor no V-Smooth")
check(rel(drop, reference(q, k, v)[0]) < 0.05, "drop-in error %.4f" % rel(drop, reference(q, k, v)[0]))

# ---- torch CPU tensors (when torch is installed) ---------------------------------
try:
    import torch
except ImportError:
    torch = None
    print("test_python: torch not installed, torch checks SKIPPED (numpy checks ran)")
if torch is not None:
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    out_t, lse_t = vcattn.attention(tq, tk, tv, return_lse=True)
    out_n, lse_n = vcattn.attention(q, k, v, return_lse=True)
    check(np.array_equal(out_t.numpy(), out_n) and np.array_equal(lse_t.numpy(), lse_n), "torch != numpy")
    # the library gets an LSE buffer only when the caller asks for the LSE (it forms none otherwise)
    from vcattn import _core as core
    given, c_run = [], core.run
    core.run = lambda *a, **kw: (given.append(a[6].value is not None), c_run(*a, **kw))[1]
    try:
        plain_t, plain_n = vcattn.attention(tq, tk, tv), vcattn.attention(q, k, v)
        vcattn.attention(tq, tk, tv, return_lse=True)
        vcattn.sdpa(tq, tk, tv, enable_gqa=True)
    finally:
        core.run = c_run
    check(given == [False, False, True, False], "LSE buffers passed (plain torch, numpy, return_lse, sdpa): %s" % given)
    check(torch.equal(plain_t, out_t) and np.array_equal(plain_n, out_n), "output differs without return_lse")
    bq, bk, bv = (x.to(torch.bfloat16) for x in (tq, tk, tv))
    out_b = vcattn.attention(bq, bk, bv)
    check(out_b.dtype == torch.bfloat16 and rel(out_b.float().numpy(), ref) < 0.06, "bfloat16 torch")
    strided = torch.from_numpy(np.ascontiguousarray(nhd[0])).transpose(1, 2)  # non-contiguous HND view
    check(torch.equal(vcattn.attention(strided, tk, tv), out_t), "strided view differs")
    raises(ValueError, lambda: vcattn.attention(tq, tk.double(), tv), "dtype", "mixed dtypes")
    raises(TypeError, lambda: vcattn.attention(tq, k, v), "all be torch tensors or all numpy", "torch q, numpy k")
    gq = tq.clone().requires_grad_()
    raises(RuntimeError, lambda: vcattn.attention(gq, tk, tv), "inference only", "requires_grad input")
    with torch.no_grad():
        check(torch.equal(vcattn.attention(gq, tk, tv), out_t), "requires_grad input under no_grad")
    check(torch.equal(vcattn.attention(tq, tk, tv, method="vc", hadamard=1),
                      torch.from_numpy(out_h)), "torch: switches through the custom op")

    def f(a, b, c):
        return vcattn.attention(a, b, c) * 2.0
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    check(torch.equal(compiled(tq, tk, tv), out_t * 2.0), "torch.compile(fullgraph=True) result differs")

    # per-layer states under torch.compile: one graph serves every layer (the
    # state's id is a tensor input, not a constant), each layer's own state is
    # used, and Schedule.layer may be first called inside a fullgraph region
    from torch._dynamo.utils import counters

    class Block(torch.nn.Module):
        def __init__(self, state):
            super().__init__()
            self.state = state

        def forward(self, a, b, c):
            return vcattn.attention(a, b, c, state=self.state) * 2.0
    torch._dynamo.reset()
    counters.clear()
    sess = vcattn.Schedule(num_inference_steps=4)
    blocks = [torch.compile(Block(sess.layer(i)), fullgraph=True, backend="aot_eager") for i in range(4)]
    eager = vcattn.attention(tq, tk, tv, state=vcattn.Schedule(num_inference_steps=4).layer(0)) * 2.0
    firsts = [blk(tq, tk, tv) for blk in blocks]
    check(all(torch.equal(x, eager) for x in firsts), "compiled per-layer calls differ from the eager call")
    for blk in blocks:
        blk(tq, tk, tv)
    check(counters["stats"]["unique_graphs"] == 1, "4 layers compiled into %d graphs, want 1"
          % counters["stats"]["unique_graphs"])
    check([sess.layer(i).plan() for i in range(4)] == ["warm"] * 4,
          "each layer's state grouped: %s" % [sess.layer(i).plan() for i in range(4)])
    inner = vcattn.Schedule(num_inference_steps=4)
    g = torch.compile(lambda a, b, c: vcattn.attention(a, b, c, state=inner.layer("x")) + 1.0, fullgraph=True,
                      backend="aot_eager")
    check(torch.equal(g(tq, tk, tv), eager / 2.0 + 1.0) and len(inner) == 1 and inner.layer("x").plan() == "warm",
          "Schedule.layer first called inside torch.compile(fullgraph=True)")

    # vcattn.sdpa: torch SDPA's signature; vcattn on plain calls (the drop-in
    # call's bits), torch SDPA's exact result on everything else, routes counted
    import torch.nn.functional as F
    sq, sk, sv = (torch.randn(2, 4, 300, 64) for _ in range(3))
    routes0 = dict(vcattn.sdpa_routes)
    check(torch.equal(vcattn.sdpa(sq, sk, sv), vcattn.attention(sq, sk, sv)), "sdpa: plain call not vcattn's")
    check(torch.equal(vcattn.sdpa(sq, sk[:, :2], sv[:, :2], enable_gqa=True, scale=0.1),
                      vcattn.attention(sq, sk[:, :2], sv[:, :2], scale=0.1)), "sdpa: GQA with a scale")
    mask = torch.rand(300, 300) > 0.3
    gq = sq.clone().requires_grad_()
    for label, args, kwargs in (("mask", (sq, sk, sv), dict(attn_mask=mask)), ("causal", (sq, sk, sv), dict(is_causal=True)),
                                ("2-D", (sq[0, 0], sk[0, 0], sv[0, 0]), {}),
                                ("head dim 12", (sq[..., :12], sk[..., :12], sv[..., :12]), {}),
                                ("float64", (sq.double(), sk.double(), sv.double()), {})):
        check(torch.equal(vcattn.sdpa(*args, **kwargs), F.scaled_dot_product_attention(*args, **kwargs)),
              "sdpa, %s: not torch SDPA's result" % label)
    # SDPA's other ranks: [N, L, E] as N single-head calls, [..., H, L, E] with the batch dims flattened
    check(torch.equal(vcattn.sdpa(sq[0], sk[0], sv[0]), vcattn.attention(sq[0, :, None], sk[0, :, None],
                                                                          sv[0, :, None])[:, 0]), "sdpa, 3-D")
    five = [t.reshape(2, 2, 2, 300, 64) for t in (sq, sk, sv)]
    check(torch.equal(vcattn.sdpa(*five), vcattn.attention(sq, sk, sv).reshape(2, 2, 2, 300, 64)), "sdpa, 5-D")
    out_g = vcattn.sdpa(gq, sk, sv)
    check(out_g.requires_grad and torch.equal(out_g, F.scaled_dot_product_attention(gq, sk, sv)),
          "sdpa with grad: not torch SDPA's (differentiable) result")
    raises(RuntimeError, lambda: vcattn.sdpa(sq, sk[:, :2], sv[:, :2]), "", "sdpa: GQA heads without enable_gqa (SDPA's error)")
    got = {key: vcattn.sdpa_routes[key] - routes0.get(key, 0) for key in vcattn.sdpa_routes}
    check(got.get("vcattn") == 4 and got.get("sdpa:mask") == 1 and got.get("sdpa:causal") == 1 and
          got.get("sdpa:grad") == 1 and got.get("sdpa:rank") == 1, "sdpa routes counted: %s" % got)
    compiled = torch.compile(lambda a, b, c: vcattn.sdpa(a, b, c) + 1, fullgraph=True, backend="aot_eager")
    check(torch.equal(compiled(sq, sk, sv), vcattn.attention(sq, sk, sv) + 1), "sdpa under torch.compile(fullgraph=True)")

    # the length rule: CUDA calls under the threshold go to SDPA, CPU calls never
    from vcattn import _core
    before = vcattn.set_sdpa_below_keys(1 << 20)
    check(_core.too_short_for_gpu("cuda", 300) and not _core.too_short_for_gpu("cpu", 300) and
          not _core.too_short_for_gpu("cuda", 1 << 20), "length rule: cuda under, cpu never, at the threshold not")
    routes0 = dict(vcattn.sdpa_routes)
    check(torch.equal(vcattn.sdpa(sq, sk, sv), vcattn.attention(sq, sk, sv)) and
          vcattn.sdpa_routes["vcattn"] == routes0.get("vcattn", 0) + 1, "length rule: a CPU call left vcattn")
    check(vcattn.set_sdpa_below_keys(0) == 1 << 20 and not _core.too_short_for_gpu("cuda", 1), "length rule off at 0")
    rule = _core.too_short_for_gpu  # the route itself, made to hold on the CPU
    _core.too_short_for_gpu = lambda device_type, keys: True
    try:
        routes0 = dict(vcattn.sdpa_routes)
        check(torch.equal(vcattn.sdpa(sq, sk, sv), F.scaled_dot_product_attention(sq, sk, sv)) and
              vcattn.sdpa_routes["sdpa:short"] == routes0.get("sdpa:short", 0) + 1,
              "length rule: a short call is not SDPA's exact result, counted")
    finally:
        _core.too_short_for_gpu = rule
    for bad in (-1, 2.5, True, "10"):
        raises(ValueError, lambda: vcattn.set_sdpa_below_keys(bad), "non-negative int", "set_sdpa_below_keys(%r)" % (bad,))
    vcattn.set_sdpa_below_keys(before)

    # varlen: packed sequences, each its own call (bit for bit), GQA, compiled, refusals
    lens = [100, 257, 31]
    vq, vk, vv = torch.randn(388, 4, 64), torch.randn(388, 2, 64), torch.randn(388, 2, 64)
    cu = torch.tensor([0, 100, 357, 388], dtype=torch.int32)
    packed = vcattn.attention_varlen(vq, vk, vv, cu, cu, max_seqlen_q=257, max_seqlen_k=257)
    alone = [vcattn.attention(vq[None, a:b], vk[None, a:b], vv[None, a:b], tensor_layout="NHD")[0]
             for a, b in zip(cu[:-1].tolist(), cu[1:].tolist())]
    check(torch.equal(packed, torch.cat(alone)), "varlen differs from one call per sequence")
    cu_k = torch.tensor([0, 50, 300, 388], dtype=torch.int64)  # other key lengths
    packed_k = vcattn.attention_varlen(vq, vk, vv, cu, cu_k)
    check(torch.equal(packed_k[100:357], vcattn.attention(vq[None, 100:357], vk[None, 50:300], vv[None, 50:300],
                                                         tensor_layout="NHD")[0]), "varlen with other key lengths")
    compiled_varlen = torch.compile(lambda *a: vcattn.attention_varlen(*a) + 1, fullgraph=True, backend="aot_eager")
    check(torch.equal(compiled_varlen(vq, vk, vv, cu, cu), packed + 1), "varlen under torch.compile(fullgraph=True)")
    raises(ValueError, lambda: vcattn.attention_varlen(vq, vk, vv, torch.tensor([0, 100, 90, 388]), cu),
           "must rise from 0", "varlen offsets that fall")
    raises(ValueError, lambda: vcattn.attention_varlen(vq, vk, vv, torch.tensor([0, 100, 387]), torch.tensor([0, 1, 388])),
           "must rise from 0 to 388", "varlen offsets that end short")
    raises(ValueError, lambda: vcattn.attention_varlen(vq, vk, vv, cu, cu[:3]), "sequences", "varlen batch mismatch")
    raises(ValueError, lambda: vcattn.attention_varlen(vq[None], vk, vv, cu, cu), "[total_tokens", "varlen 4-D q")

    # RoPE applied by the quantizers: the same bits as rotating q and k in
    # float32 first (both round each product and the difference once: the
    # library is built with -ffp-contract=off), both styles; refusals
    rq, rk, rv = (torch.randn(1, 2, 300, 64) for _ in range(3))
    angles = torch.rand(300, 32) * 6.3
    cos, sin = angles.cos(), angles.sin()

    def rotated(x, style):
        a, b = (x[..., 0::2], x[..., 1::2]) if style == "interleaved" else (x[..., :32], x[..., 32:])
        ra, rb = a * cos - b * sin, a * sin + b * cos
        return torch.stack((ra, rb), -1).flatten(-2) if style == "interleaved" else torch.cat((ra, rb), -1)
    for style in ("interleaved", "half"):
        fused = vcattn.attention(rq, rk, rv, rope=(cos, sin), rope_style=style)
        check(torch.equal(fused, vcattn.attention(rotated(rq, style), rotated(rk, style), rv)),
              "rope %s: fused differs from rotating q and k first" % style)
        nhd_in = [t.transpose(1, 2) for t in (rq, rk, rv)]
        check(torch.equal(vcattn.attention(*nhd_in, tensor_layout="NHD", rope=(cos, sin), rope_style=style),
                          fused.transpose(1, 2)), "rope %s: NHD differs from HND" % style)
    check(not torch.equal(fused, vcattn.attention(rq, rk, rv)), "rope tables had no effect")
    # per-sample, per-head tables [B, H, N, D/2], here a strided view of [B, N, H, D/2] rows (LTX-Video's
    # layout); [1, H, ...] and [B, 1, ...] tables broadcast; the same bits as rotating each head first
    bq, bk, bv = (torch.randn(2, 3, 300, 64) for _ in range(3))
    head_angles = (torch.rand(2, 300, 3, 32) * 6.3).transpose(1, 2)
    hcos, hsin = head_angles.cos(), head_angles.sin()

    def rotated_heads(x, c, s, style):
        a, b = (x[..., 0::2], x[..., 1::2]) if style == "interleaved" else (x[..., :32], x[..., 32:])
        ra, rb = a * c - b * s, a * s + b * c
        return torch.stack((ra, rb), -1).flatten(-2) if style == "interleaved" else torch.cat((ra, rb), -1)
    for style in ("interleaved", "half"):
        for c, s in ((hcos, hsin), (hcos[:1], hsin[:1]), (hcos[:, :1], hsin[:, :1])):
            fused = vcattn.attention(bq, bk, bv, rope=(c, s), rope_style=style)
            check(torch.equal(fused, vcattn.attention(rotated_heads(bq, c, s, style), rotated_heads(bk, c, s, style),
                                                      bv)),
                  "rope %s, tables %s: fused differs from rotating each head first" % (style, tuple(c.shape)))
    nhd_in = [t.transpose(1, 2) for t in (bq, bk, bv)]
    check(torch.equal(vcattn.attention(*nhd_in, tensor_layout="NHD", rope=(hcos, hsin)),
                      vcattn.attention(bq, bk, bv, rope=(hcos, hsin)).transpose(1, 2)), "per-head rope: NHD vs HND")
    compiled_rope = torch.compile(lambda *a: vcattn.attention(*a[:3], rope=a[3:]) + 1, fullgraph=True,
                                  backend="aot_eager")
    check(torch.equal(compiled_rope(bq, bk, bv, hcos, hsin), vcattn.attention(bq, bk, bv, rope=(hcos, hsin)) + 1),
          "per-head rope under torch.compile(fullgraph=True)")
    raises(ValueError, lambda: vcattn.attention(bq, bk, bv, rope=(hcos[:, :2], hsin[:, :2])), "heads or 1",
           "per-head rope tables of the wrong head count")
    raises(ValueError, lambda: vcattn.attention(bq, bk, bv, rope=(hcos, hsin[:1])), "same shape",
           "rope cos and sin of different shapes")
    raises(ValueError, lambda: vcattn.attention(torch.randn(2, 4, 300, 64), torch.randn(2, 2, 300, 64),
                                                torch.randn(2, 2, 300, 64), rope=(hcos[:, :1].expand(2, 4, 300, 32),
                                                                                  hsin[:, :1].expand(2, 4, 300, 32))),
           "as many key heads", "per-head rope tables with GQA")
    raises(ValueError, lambda: vcattn.attention(rq, rk, rv, rope=(cos[:100], sin[:100])), "[tokens, head_dim/2]",
           "rope tables of the wrong length")
    raises(ValueError, lambda: vcattn.attention(rq, rk[:, :, :200], rv[:, :, :200], rope=(cos, sin)),
           "as many tokens", "rope with Nq != Nk")
    raises(ValueError, lambda: vcattn.attention(rq, rk, rv, rope=(cos, sin), rope_style="neox"), "rope_style",
           "unknown rope style")
    raises(ValueError, lambda: vcattn.attention(rq, rk, rv, rope_style="neox"), "rope_style",
           "unknown rope style without tables (was a KeyError)")
    raises(TypeError, lambda: vcattn.attention(rq, rk, rv, rope=cos), "(cos, sin)", "rope not a pair")
    raises(TypeError, lambda: vcattn.attention(q, k, v, rope=(cos, sin)), "torch tensors only", "rope with numpy")
    raises(ValueError, lambda: vcattn.attention(rq, rk, rv, rope=(cos, sin * float("nan"))), "NaN",
           "NaN in a rope table")

    # ring attention on one device: keys in 3 chunks, merged through the LSE
    from vcattn import parallel
    for method in ("bf16", "vc"):
        whole = vcattn.attention(tq, tk, tv, method=method)
        bounds = (0, 100, 220, 300)
        out_m = lse_m = None
        for a, b in zip(bounds, bounds[1:]):
            o, l = parallel.xdit_attention(tq, tk[:, :, a:b], tv[:, :, a:b], attention_kwargs={"method": method})
            out_m, lse_m = (o, l) if out_m is None else parallel.merge(out_m, lse_m, o, l)
        err_split, err_whole = rel(out_m.numpy(), ref), rel(whole.numpy(), ref)
        check(err_split <= 1.5 * err_whole + 1e-4, "ring merge (%s): error %.3g vs the unsplit call's %.3g"
              % (method, err_split, err_whole))
        check(np.abs(lse_m.numpy() - ref_lse).max() < 0.05, "merged LSE (%s)" % method)
    ro, rl = parallel.ring_forward(*(torch.from_numpy(x) for x in nhd), method="bf16")
    check(torch.allclose(ro.transpose(1, 2), vcattn.attention(tq, tk, tv, method="bf16"), atol=1e-6), "ring_forward layout")
    raises(ValueError, lambda: parallel.ring_forward(*(torch.from_numpy(x) for x in nhd), window_size=(8, 8)),
           "sliding", "ring window")
    raises(TypeError, lambda: parallel.xdit_attention(tq, tk, tv, attention_kwargs={"alibi": 1}), "attention_kwargs",
           "xdit kwargs")

finish("test_python")
