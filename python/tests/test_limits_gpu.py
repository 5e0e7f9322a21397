"""The GPU at its limits (issue 7; run on the device, exits 77 without CUDA
or without the memory):
- tensors of more than 2^31 elements in both layouts: the last (batch, head)
  slice of the big call equals the call on that slice alone, bit for bit, with
  sage2 (no grouping, so the slice sees the same arithmetic), and vc's rows
  there are as close to FP32 attention as usual (64-bit offsets everywhere);
- a 256K-token sequence, grouping step included: sampled rows and their LSE
  against FP32 attention;
- out of device memory: OutOfMemoryError naming it, and once memory is freed
  the same context gives the usual bits."""
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import check, finish, require_cuda  # noqa: E402

torch = require_cuda("test_limits_gpu", free_gb=60)
import vcattn  # noqa: E402

TOL = 0.06  # relative L2 error of vc on Gaussian inputs, as test_python_gpu


def sampled_error(q, k, v, out, lse, rows, layout):
    """Relative L2 error of out's rows (of the last batch entry and head)
    against FP32 attention, and the worst LSE error; q/k/v in `layout`."""
    pick = (lambda t: t[-1, -1]) if layout == "HND" else (lambda t: t[-1, :, -1])
    qs, ks, vs, os_ = pick(q)[rows].float(), pick(k).float(), pick(v).float(), pick(out)[rows].float()
    scores = (qs @ ks.T) * qs.shape[-1] ** -0.5
    ref = torch.softmax(scores, -1) @ vs
    err = ((os_ - ref).norm() / ref.norm()).item()
    lse_err = (lse[-1, -1][rows] - torch.logsumexp(scores, -1)).abs().max().item() if lse is not None else 0.0
    return err, lse_err


def huge(layout, b, h, n, d=128):
    shape = (b, h, n, d) if layout == "HND" else (b, n, h, d)
    elements = b * h * n * d
    check(elements > 2 ** 31, "%s: %d elements is not over 2^31" % (layout, elements))
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    k += 0.5
    tail = (lambda t: t[-1:, -4:].contiguous()) if layout == "HND" else (lambda t: t[-1:, :, -4:].contiguous())
    big = vcattn.attention(q, k, v, tensor_layout=layout, method="sage2")
    small = vcattn.attention(tail(q), tail(k), tail(v), tensor_layout=layout, method="sage2")
    check(torch.equal(tail(big), small), "%s %s: the last slice of the big sage2 call differs from the slice's call"
          % (layout, shape))
    del big, small
    out, lse = vcattn.attention(q, k, v, tensor_layout=layout, method="vc", return_lse=True)
    rows = torch.linspace(0, n - 1, 256, device="cuda").long()
    err, lse_err = sampled_error(q, k, v, out, lse, rows, layout)
    print("%s %s (%.2fG elements): vc error on the last head %.4f, LSE %.2e" % (layout, shape, elements / 1e9, err,
                                                                                lse_err))
    check(err < TOL and lse_err < 0.05, "%s: vc error %.4f, LSE error %.2e" % (layout, err, lse_err))


def long_sequence(n=256 * 1024, h=2, d=128):
    g = torch.Generator(device="cuda").manual_seed(2)
    q, k, v = (torch.randn(1, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    k += 0.5
    layer = vcattn.Schedule(num_inference_steps=40).layer("long")  # step 0: a grouping step
    out, lse = vcattn.attention(q, k, v, method="vc", return_lse=True, state=layer)
    rows = torch.linspace(0, n - 1, 256, device="cuda").long()
    err, lse_err = sampled_error(q, k, v, out, lse, rows, "HND")
    print("N=%d: vc error %.4f, LSE %.2e" % (n, err, lse_err))
    check(not out.isnan().any().item(), "N=%d: NaN in the output" % n)
    check(err < TOL and lse_err < 0.05, "N=%d: vc error %.4f, LSE error %.2e" % (n, err, lse_err))


def out_of_memory():
    """Fill the GPU with torch until it refuses, give 256 MB back: the output
    (1.3 MB: 128 queries) fits, the workspace (K and V codes of 40 x 75600
    keys, ~0.8 GB) does not."""
    q = torch.randn(1, 40, 128, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 40, 75600, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    expected = vcattn.attention(q, k, v)
    results = {}

    def fresh_context():  # a new thread has a new context, with an empty memory pool
        chunks = []
        try:
            while True:
                chunks.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            pass
        del chunks[-1]
        torch.cuda.empty_cache()
        results["free_gb"] = torch.cuda.mem_get_info()[0] / 2**30
        try:
            vcattn.attention(q, k, v)
            results["error"] = None
        except vcattn.OutOfMemoryError as e:
            results["error"] = str(e)
        except Exception as e:  # another exception is a failure, reported below
            results["error"] = "%s: %s" % (type(e).__name__, e)
            results["wrong_type"] = True
        del chunks
        torch.cuda.empty_cache()
        results["after"] = vcattn.attention(q, k, v)
        torch.cuda.synchronize()

    worker = threading.Thread(target=fresh_context)
    worker.start()
    worker.join()
    print("out of memory (%.2f GB free): %s" % (results.get("free_gb", -1), results.get("error")))
    check(results.get("error") is not None and "out of device memory" in results["error"]
          and not results.get("wrong_type"), "no OutOfMemoryError: %r" % results.get("error"))
    check("after" in results and torch.equal(results["after"], expected),
          "the context's next call after the out-of-memory failure differs")


huge("HND", 8, 40, 75600)
torch.cuda.empty_cache()
huge("NHD", 2, 160, 75600)
torch.cuda.empty_cache()
long_sequence()
torch.cuda.empty_cache()
out_of_memory()
finish("test_limits_gpu")
