"""The bytes each preprocessing kernel of a call must move through HBM (its
operand read once, its outputs written once), so a kernel's time can be set
against the memory bound: `bench/profile_call.py --kernels` prints each
one's share. A kernel at 100% would run at the card's peak bandwidth.

    from byte_bound import kernel_bytes, match, peak_tbps
"""
import re

PEAK_TBPS = {"H200": 4.8, "H100": 3.35}  # HBM3e / HBM3, the vendors' figures


def peak_tbps(device_name):
    """The peak HBM bandwidth (TB/s) of a card by its name, or None."""
    for card, tbps in PEAK_TBPS.items():
        if card in device_name:
            return tbps
    return None


def kernel_bytes(batch, heads_q, heads_kv, tokens, head_dim, in_bytes=2, probe_rows=32):
    """[(pattern, label, bytes)] for a call of B x H x N x D inputs of
    in_bytes an element with `probe_rows` attention probe rows (0: none): a
    kernel whose demangled name matches the pattern (first match) moves that
    many bytes. The codes are a byte an element; scales, means and the
    permutation are left out (under 1% at D 128)."""
    kv = batch * heads_kv * tokens * head_dim
    q = batch * heads_q * tokens * head_dim
    probe = batch * heads_kv * probe_rows * tokens  # the probe's code bytes, one per (row, key)
    return [
        (r"k_mean_partial_kernel", "K mean", kv * in_bytes),
        (r"quantize_rows_kernel<\d+, true", "K rows", kv * in_bytes + kv),
        (r"quantize_rows_kernel<\d+, false", "Q rows", q * in_bytes + q),
        (r"probe_tile_kernel", "probe tiles", kv + probe),
        (r"v_stats_kernel", "V statistics", kv * in_bytes + probe),
        (r"v_encode_kernel", "V codes", kv * in_bytes + kv),
        (r"principal_(mean|gram|keys)_kernel", "principal order pass", kv * in_bytes),
    ]


def match(name, table):
    """(label, bytes) of the first pattern of table that name matches, or None."""
    for pattern, label, nbytes in table:
        if re.search(pattern, name):
            return label, nbytes
    return None
