"""One clear line and a non-zero exit when a benchmark cannot run here,
instead of a traceback from deep inside torch."""
import sys


def torch_or_exit(script, cuda=True):
    try:
        import torch
    except ImportError:
        sys.exit("%s: needs PyTorch (pip install torch); nothing was run" % script)
    if cuda and not torch.cuda.is_available():
        sys.exit("%s: needs a CUDA GPU (torch.cuda.is_available() is False); nothing was run" % script)
    return torch


def cuda_or_exit(script, device):
    """For scripts that also run on the CPU: device 'cuda' needs a GPU."""
    import torch
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("%s: --device cuda needs a CUDA GPU (torch.cuda.is_available() is False); "
                 "nothing was run (--device cpu runs on the CPU)" % script)
