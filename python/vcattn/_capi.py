"""ctypes mirror of include/vcattn.h: the structs, enums and calls the Python
side uses. python/tests/test_abi.py holds it to the header, field by field."""
import ctypes
import enum
import os

VERSION = (0, 2)  # VCATTN_VERSION_MAJOR, _MINOR: the structs above are this version's
F32, F16, BF16 = 0, 1, 2
BACKEND_AUTO, BACKEND_CPU, BACKEND_CUDA = 0, 1, 2


class Status(enum.IntEnum):
    """vcattn_status (VCATTN_OK, VCATTN_ERR_<name>)."""
    OK = 0
    NULL_POINTER = 1
    INVALID_ARGUMENT = 2
    SHAPE_MISMATCH = 3
    UNSUPPORTED_DTYPE = 4
    UNSUPPORTED_HEAD_DIM = 5
    UNSUPPORTED_CONFIG = 6
    NONFINITE_INPUT = 7
    BACKEND_UNAVAILABLE = 8
    OUT_OF_MEMORY = 9
    IO = 10
    BAD_FILE_FORMAT = 11
    UNKNOWN_NAME = 12
    DEVICE = 13
    INTERNAL = 14


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int),
                ("batch", ctypes.c_int64), ("heads", ctypes.c_int64),
                ("tokens", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("stride_batch", ctypes.c_int64), ("stride_head", ctypes.c_int64),
                ("stride_token", ctypes.c_int64)]


class Rope(ctypes.Structure):
    _fields_ = [("style", ctypes.c_int), ("q_cos", ctypes.c_void_p), ("q_sin", ctypes.c_void_p),
                ("k_cos", ctypes.c_void_p), ("k_sin", ctypes.c_void_p),
                ("q_stride_batch", ctypes.c_int64), ("q_stride_head", ctypes.c_int64),
                ("q_stride_token", ctypes.c_int64), ("k_stride_batch", ctypes.c_int64),
                ("k_stride_head", ctypes.c_int64), ("k_stride_token", ctypes.c_int64)]


class Config(ctypes.Structure):
    _fields_ = [("qk_format", ctypes.c_int), ("k_smoothing", ctypes.c_int),
                ("hadamard", ctypes.c_int), ("sm_scale", ctypes.c_float),
                ("p_format", ctypes.c_int), ("expcast_beta", ctypes.c_float),
                ("v_format", ctypes.c_int), ("vsmooth", ctypes.c_int),
                ("kmeans_clusters", ctypes.c_int), ("kmeans_iters", ctypes.c_int),
                ("kmeans_warm_iters", ctypes.c_int), ("kmeans_seed", ctypes.c_uint64),
                ("group_window", ctypes.c_float), ("group_refresh", ctypes.c_int),
                ("demean_outside_window", ctypes.c_int), ("check_finite", ctypes.c_int),
                ("num_threads", ctypes.c_int), ("q_smoothing", ctypes.c_int),
                ("sink_guard", ctypes.c_float), ("expcast_min_keys", ctypes.c_int),
                ("vsmooth_probe_rows", ctypes.c_int), ("vsmooth_order_rows", ctypes.c_int)]


def find_library():
    """libvcattn.so: $VCATTN_LIB, the installed package's copy, or a build folder of the checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    candidates = [os.environ.get("VCATTN_LIB", ""), os.path.join(here, "libvcattn.so")]
    candidates += [os.path.join(root, b, "libvcattn.so") for b in ("build", "build-dev")]
    for path in candidates:
        if path and os.path.exists(path):
            return path
    raise OSError("libvcattn.so not found: build it (make) or set VCATTN_LIB")


def load(path=None):
    path = path or find_library()
    lib = ctypes.CDLL(path)
    vp, i32 = ctypes.c_void_p, ctypes.c_int
    size = getattr(lib, "vcattn_config_size", None)
    if size is not None:
        size.restype = ctypes.c_size_t
    if size is None or size() != ctypes.sizeof(Config):
        raise OSError(f"{path}: its vcattn_config is {'of unknown size' if size is None else f'{size()} bytes'}, "
                      f"this vcattn package's is {ctypes.sizeof(Config)} bytes: the library and the package "
                      f"come from different versions (rebuild, or point VCATTN_LIB at the matching library)")
    lib.vcattn_version_number.restype = ctypes.c_uint
    linked = divmod(lib.vcattn_version_number() // 100, 100)
    if linked != VERSION:
        raise OSError(f"{path}: the library is version {linked[0]}.{linked[1]}, this vcattn package's structs are "
                      f"{VERSION[0]}.{VERSION[1]}'s (rebuild, or point VCATTN_LIB at the matching library)")
    lib.vcattn_create.argtypes = [ctypes.POINTER(vp), i32]
    lib.vcattn_destroy.argtypes = [vp]
    lib.vcattn_last_error.argtypes = [vp]
    lib.vcattn_last_error.restype = ctypes.c_char_p
    lib.vcattn_set_cuda_stream.argtypes = [vp, vp]
    lib.vcattn_set_progress.argtypes = [vp, vp, vp]
    lib.vcattn_config_from_method.argtypes = [ctypes.c_char_p, ctypes.POINTER(Config)]
    lib.vcattn_layer_create.argtypes = [ctypes.POINTER(vp), i32]
    lib.vcattn_layer_destroy.argtypes = [vp]
    lib.vcattn_layer_set_step.argtypes = [vp, i32]
    lib.vcattn_attention.argtypes = [vp, ctypes.POINTER(Config), ctypes.POINTER(Tensor),
                                     ctypes.POINTER(Tensor), ctypes.POINTER(Tensor),
                                     ctypes.POINTER(Tensor), vp, vp, vp]
    lib.vcattn_version_string.restype = ctypes.c_char_p
    lib.vcattn_status_string.argtypes = [i32]
    lib.vcattn_status_string.restype = ctypes.c_char_p
    lib.vcattn_backend_available.argtypes = [i32, ctypes.POINTER(ctypes.c_char_p)]
    lib.vcattn_layer_step.argtypes = [vp]
    lib.vcattn_layer_plan.argtypes = [vp, ctypes.POINTER(Config)]
    lib.vcattn_layer_reset.argtypes = [vp]
    lib.vcattn_context_backend.argtypes = [vp]
    return lib
