"""The Python tests' minimal harness: check() records, finish() prints the
"N passed, N failed" line ctest reads and exits with the status."""
import sys

counts = {"passed": 0, "failed": 0}


def check(cond, what):
    counts["passed" if cond else "failed"] += 1
    if not cond:
        print("FAIL:", what)


def raises(exc, fn, needle, what):
    """fn() must raise exc with needle in its message (another exception fails)."""
    try:
        fn()
    except exc as e:
        check(needle in str(e), "%s: message %r lacks %r" % (what, str(e), needle))
        return
    except Exception as e:
        check(False, "%s: raised %s: %s" % (what, type(e).__name__, e))
        return
    check(False, "%s: no exception" % what)


def require_cuda(name, free_gb=0):
    """torch with a CUDA device (and free_gb of free memory), or exit 77 saying why."""
    try:
        import torch
    except ImportError:
        skip(name, "torch is not installed")
    if not torch.cuda.is_available():
        skip(name, "no CUDA device")
    if free_gb and torch.cuda.mem_get_info()[0] < free_gb << 30:
        skip(name, "needs %d GB of free GPU memory" % free_gb)
    return torch


def test_device(name):
    """The device VCATTN_TEST_DEVICE names ("cpu" by default); "cuda" without a
    GPU torch can use exits 77 saying why."""
    import os
    device = os.environ.get("VCATTN_TEST_DEVICE", "cpu")
    if device == "cuda":
        require_cuda(name)
    return device


def skip(name, why):
    print("%s: SKIPPED, %s" % (name, why))
    sys.exit(77)


def finish(name):
    print("%s: %d passed, %d failed" % (name, counts["passed"], counts["failed"]))
    sys.exit(1 if counts["failed"] else 0)


def run_ranks(worker, world, *args):
    """worker(rank, path, *args) on `world` processes (torch.multiprocessing),
    path a rendezvous file in a fresh temporary folder; returns what rank 0
    saved with torch.save at path + ".out"."""
    import os
    import tempfile
    import torch
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rendezvous")
        mp.spawn(worker, args=(path,) + args, nprocs=world)
        return torch.load(path + ".out")


def leave_rank():
    """A worker's end, once its results are saved: gloo's threads sometimes
    abort the interpreter's own exit (std::terminate, about 1 run in 6), so
    the process leaves at once."""
    import os
    sys.stdout.flush()
    os._exit(0)
