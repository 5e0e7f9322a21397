"""`python -m vcattn`: what this machine will run and why (as torch.utils.collect_env does)."""
import ctypes
import platform
import sys

from . import _capi, _core


def _available(backend):
    why = ctypes.c_char_p()
    ok = _core.lib().vcattn_backend_available(backend, ctypes.byref(why))
    return bool(ok), (why.value or b"").decode()


def report():
    lines = ["vcattn %s" % _core.lib().vcattn_version_string().decode(),
             "library: %s" % _capi.find_library(),
             "python: %s (%s)" % (platform.python_version(), platform.platform())]
    cpu_ok, cpu_why = _available(_capi.BACKEND_CPU)
    cuda_ok, cuda_why = _available(_capi.BACKEND_CUDA)
    lines.append("cpu backend: %s" % ("available" if cpu_ok else "unavailable: " + cpu_why))
    lines.append("cuda backend: %s" % ("available (sm_90a kernels, head dims 64 and 128)" if cuda_ok
                                       else "unavailable: " + cuda_why))
    try:
        import numpy
        lines.append("numpy: %s" % numpy.__version__)
    except ImportError:
        lines.append("numpy: not installed")
    try:
        import torch
        gpu = "no CUDA device"
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            gpu = "%s (sm_%d%d)" % (torch.cuda.get_device_name(), major, minor)
        lines.append("torch: %s, CUDA %s, %s" % (torch.__version__, torch.version.cuda, gpu))
    except ImportError:
        lines.append("torch: not installed (numpy arrays run on the CPU backend)")
    lines.append("vcattn.attention runs CUDA tensors on: %s" % ("the GPU" if cuda_ok else "nothing: " + cuda_why))
    lines.append("vcattn.attention runs CPU tensors and numpy arrays on: the CPU backend")
    vc = _core.config("vc")
    lines.append("method vc (the default): V-Smooth with the attention probe on %d query rows, the token order chosen "
                 "per key head on %d rows at grouping steps, ExpCast-FP8 from %d keys"
                 % (vc.vsmooth_probe_rows, vc.vsmooth_order_rows, vc.expcast_min_keys))
    below = _core.sdpa_below_keys
    lines.append("vcattn.sdpa, the diffusers backends and ComfyUI run CUDA calls with fewer than %d keys per head on "
                 "torch SDPA, faster there (VCATTN_SDPA_BELOW_KEYS, vcattn.set_sdpa_below_keys)" % below if below else
                 "vcattn.sdpa, the diffusers backends and ComfyUI run every CUDA call they can on vcattn "
                 "(VCATTN_SDPA_BELOW_KEYS=0)")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
    sys.exit(0)
