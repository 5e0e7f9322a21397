"""vcattn: VC-Attention for video diffusion transformers (ctypes binding in _capi)."""
