"""Where the D 128 attention kernel's tile step waits, from its SASS: the
main loop's instructions before the wait for QK(j), between it and the
wait for PV(j-1) (what runs while PV(j-1) is on the tensor cores), and
after (what runs once it is done; a step with one wait for both GEMMs
splits in two), by opcode, with each part's stall cycles and scoreboard
waits from the control words and the highest register the kernel uses;
then the size of the step with the mean terms (the loop around the tile
step, less the tile step), which runs one step in eight.
ptxas schedules the waits (WARPGROUP.DEPBAR) as early as a basic block
allows, which need not be where the source waits.

    python3 tools/sass_tile_step.py [FILE] [--kernel SUBSTRING]
    python3 tools/sass_tile_step.py --self-test    # the parsing, on a made-up listing
    python3 tools/sass_tile_step.py --check LIB    # the machine-code rules, for ctest

--check reads every attention kernel of a built library and fails unless
each ExpCast kernel's tile step has no exponential per element (at most the
two rows' MUFU.EX2 for the rescale factors) and no F2I or I2F (the XU pipe's
conversions; F2IP and I2FP run on the ALU), without Q smoothing at most two
I2FP (the integer dots are read by an add, formats/expcast.h), and no
attention kernel uses local memory (spills); as a control, a kernel that takes the
exponentials (sage2's) must show at least 64 MUFU.EX2 a step. Exits 77
(skipped) without cuobjdump (PATH, or the nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm wheels) or without sm_90a kernels in the library.

FILE: a cubin or the built library (default: src/cuda/sm90/attention_d128_vc.cu
compiled here with the build's flags; needs nvcc). Needs cuobjdump (as --check finds it).
The default kernel is vc's at head dim 128 with bf16 output, no Q smoothing.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DEFAULT_KERNEL = "vc_attention_kernelILi128ELb1ELb1ELb0E13__nv_bfloat16"
FLAGS = ["-O3", "-DNDEBUG", "-arch=sm_90a", "-fmad=false", "-DVCATTN_WITH_CUDA=1", "-cubin", "-Iinclude", "-Isrc"]


def compile_default(tmp):
    out = os.path.join(tmp, "vc.cubin")
    subprocess.run(["nvcc", *FLAGS, "src/cuda/sm90/attention_d128_vc.cu", "-o", out], cwd=ROOT, check=True)
    return out


def functions(path):
    """(name, SASS body) of every kernel in a cubin or library."""
    sass = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True, check=True).stdout
    return [(body.split("\n")[0].strip(), body) for body in re.split(r"\n\s*Function : ", sass)[1:]]


def kernel_sass(path, kernel):
    for name, body in functions(path):
        if kernel in name:
            return name, body
    sys.exit("no kernel matching %r in %s" % (kernel, path))


def find_cuobjdump():
    """Puts cuobjdump (and the nvdisasm it runs) on PATH: the toolkit's, or
    the NVIDIA wheels' (nvidia/cu13/bin); False if neither is there."""
    if shutil.which("cuobjdump"):
        return True
    try:
        import nvidia  # the namespace package of the nvidia-cuda-* wheels
    except ImportError:
        return False
    for root in nvidia.__path__:
        for sub in ("cu13", "cu12", "cuda_cuobjdump"):
            bin_dir = os.path.join(root, sub, "bin")
            if os.path.exists(os.path.join(bin_dir, "cuobjdump")):
                os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
                return shutil.which("nvdisasm") is not None
    return False


EXPCAST_KERNEL = re.compile(r"vc_attention(_wg)?_kernelILi(64|128)ELb1E")  # template <D, EXPCAST = true, ...>
EXP_KERNEL = re.compile(r"vc_attention(_wg)?_kernelILi(64|128)ELb0ELb0E")  # sage2's: exponentials, no V-Smooth
INTEGER_DOT_KERNEL = re.compile(r"vc_attention(_wg)?_kernelILi(64|128)ELb1ELb\dELb0E")  # ExpCast, no Q smoothing


def check_rules(funcs):
    """The machine-code rules over (name, body) pairs: a list of violations,
    and how many ExpCast kernels were read."""
    bad, expcast, control = [], 0, 0
    for name, body in funcs:
        if "vc_attention" not in name:
            continue
        ins = instructions(body)
        local = sum(1 for x in ins if opcode(x[1]) in ("LDL", "STL"))
        if local:
            bad.append("%s: %d local-memory instructions (spills)" % (name, local))
        loop = main_loop(ins)
        if EXPCAST_KERNEL.search(name):
            expcast += 1
            if loop is None:
                bad.append("%s: no tile step with a wgmma found" % name)
                continue
            ex2 = sum(1 for x in loop if "MUFU.EX2" in x[1])
            xu = collections.Counter(opcode(x[1]) for x in loop if opcode(x[1]) in ("F2I", "I2F"))
            if ex2 > 2 or xu:
                bad.append("%s: %d MUFU.EX2 a tile step (ExpCast allows 2), %s" % (name, ex2, dict(xu) or "no F2I/I2F"))
            # without Q smoothing the scores are read by an integer add (formats/expcast.h), not converted
            i2fp = sum(1 for x in loop if opcode(x[1]) == "I2FP")
            if INTEGER_DOT_KERNEL.search(name) and i2fp > 2:  # two: the rows' maxima may be converted
                bad.append("%s: %d I2FP a tile step (the integer dots are read by an add)" % (name, i2fp))
        elif EXP_KERNEL.search(name) and loop is not None:
            control = max(control, sum(1 for x in loop if "MUFU.EX2" in x[1]))
    if expcast and control < 64:
        bad.append("control: no kernel that takes the exponentials shows 64 MUFU.EX2 a step (%d): "
                   "the count cannot be trusted" % control)
    return bad, expcast


def check(path):
    if not find_cuobjdump():
        print("sass check: skipped (no cuobjdump and nvdisasm: the toolkit's, or pip install "
              "nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
        sys.exit(77)
    bad, expcast = check_rules(functions(path))
    if not expcast:
        print("sass check: skipped (no sm_90a ExpCast kernels in %s: built without CUDA?)" % path)
        sys.exit(77)
    for line in bad:
        print("FAIL:", line)
    if bad:
        sys.exit(1)
    print("sass check: %d ExpCast kernels, no exponential, F2I or I2F per element (nor I2FP without Q smoothing), "
          "no spills in the attention kernels" % expcast)


def instructions(body):
    """(address, text, stall cycles, waits on a scoreboard) per instruction.
    The control word (the upper 64 bits, on the line after the instruction)
    holds the stall count ptxas set for fixed-latency dependences (bits
    41-44) and the scoreboards the instruction waits on (bits 52-57)."""
    out = []
    lines = body.split("\n")
    for i, line in enumerate(lines):
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            hi = re.search(r"/\* 0x([0-9a-f]{16}) \*/", lines[i + 1]) if i + 1 < len(lines) else None
            control = int(hi.group(1), 16) if hi else 0
            out.append((int(m.group(1), 16), m.group(2).strip(), (control >> 41) & 0xF, (control >> 52) & 0x3F != 0))
    return out


def opcode(text):
    return (text.split()[1] if text.startswith("@") else text.split()[0]).split(".")[0]


def loops(ins):
    """The bodies of the backward branches that hold a wgmma, shortest first."""
    where = {x[0]: i for i, x in enumerate(ins)}
    found = []
    for i, (a, text, _, _) in enumerate(ins):
        m = re.search(r"BRA .*?0x([0-9a-f]+)", text)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in where:
            body = ins[where[int(m.group(1), 16)]:i + 1]
            if any("GMMA" in x[1] for x in body):
                found.append(body)
    return sorted(found, key=len)


def main_loop(ins):
    """The shortest backward branch's body that holds a wgmma: the tile step."""
    found = loops(ins)
    return found[0] if found else None


def mean_step(ins):
    """The instructions of the loop around the tile step that lie outside it
    and hold a wgmma: the step with the mean terms (one in kMeanTiles), as
    (instructions, stall cycles); None where there is no such loop."""
    found = loops(ins)
    if not found:
        return None
    inner = {x[0] for x in found[0]}
    for body in found[1:]:
        rest = [x for x in body if x[0] not in inner]
        if inner <= {x[0] for x in body} and any("GMMA" in x[1] for x in rest):
            return len(rest), sum(x[2] for x in rest)
    return None


def split(body):
    """The tile step's parts as (label, instructions, stall cycles, scoreboard
    waits, opcode counts), with the loop's length and waits; None without a
    loop that holds a wgmma."""
    loop = main_loop(instructions(body))
    if loop is None:
        return None
    waits = [k for k, x in enumerate(loop) if "WARPGROUP.DEPBAR" in x[1]]
    if not waits:
        bounds = []
    elif len(waits) == 1:  # one wait for both GEMMs
        bounds = [("to the wait for QK(j) and PV(j-1)", 0, waits[0]), ("after both are done", waits[0], len(loop))]
    else:
        bounds = [("to the wait for QK(j)", 0, waits[0]),
                  ("while PV(j-1) runs (to its wait)", waits[0], waits[-1]),
                  ("after PV(j-1) is done", waits[-1], len(loop))]
    parts = [(label, hi - lo, sum(x[2] for x in loop[lo:hi]), sum(x[3] for x in loop[lo:hi]),
              collections.Counter(opcode(x[1]) for x in loop[lo:hi])) for label, lo, hi in bounds]
    return len(loop), len(waits), parts


def self_test():
    """The parsing on a made-up listing: a loop with two wgmmas, two waits
    and known control words (stall in bits 41-44, scoreboard mask 52-57)."""
    def line(addr, text, stall, wait_mask=0):
        hi = (stall << 41) | (wait_mask << 52)
        return ("        /*%04x*/                   %s ;  /* 0x%016x */\n"
                "                                    /* 0x%016x */" % (addr, text, 0, hi))
    body = "\n".join([
        line(0x00, "MOV R1, c[0x0][0x28]", 1),
        line(0x10, "IGMMA.64x128x32.S8.S8 R92, gdesc[UR16], RZ, !UPT, gsb0", 2),
        line(0x20, "QGMMA.64x136x32.F32.E4M3.E4M3 R24, R164, gdesc[UR16], RZ, !UPT, gsb0", 2),
        line(0x30, "WARPGROUP.DEPBAR.LE gsb0, 0x1", 1),
        line(0x40, "I2FP.F32.S32 R92, R92", 2),
        line(0x50, "I2FP.F32.S32 R93, R93", 2),
        line(0x60, "WARPGROUP.DEPBAR.LE gsb0, 0x0", 1),
        line(0x70, "SHFL.BFLY PT, R26, R92, 0x1, 0x1f", 1, 0x1),
        line(0x80, "FFMA R24, R24, R26, R93", 4, 0x2),
        line(0x90, "@!P0 BRA 0x10", 5),
        line(0xa0, "EXIT", 5)])
    length, waits, parts = split(body)
    got = [(label, n, stall, scoreboard) for label, n, stall, scoreboard, _ in parts]
    want = [("to the wait for QK(j)", 2, 4, 0), ("while PV(j-1) runs (to its wait)", 3, 5, 0),
            ("after PV(j-1) is done", 4, 11, 2)]
    if (length, waits, got) != (9, 2, want):
        sys.exit("self-test failed: %r" % ((length, waits, got),))
    # the same loop inside an outer one whose other step holds a wgmma too
    outer = "\n".join([
        line(0x00, "MOV R1, c[0x0][0x28]", 1),
        line(0x10, "IGMMA.64x128x32.S8.S8 R92, gdesc[UR16], RZ, !UPT, gsb0", 2),
        line(0x20, "@!P0 BRA 0x10", 5),
        line(0x30, "QGMMA.64x136x32.F32.E4M3.E4M3 R24, R164, gdesc[UR16], RZ, !UPT, gsb0", 3),
        line(0x40, "FFMA R24, R24, R26, R93", 4),
        line(0x50, "@!P1 BRA 0x00", 5),
        line(0x60, "EXIT", 5)])
    if mean_step(instructions(outer)) != (4, 13) or mean_step(instructions(body)) is not None:
        sys.exit("self-test failed: the mean step %r" % (mean_step(instructions(outer)),))

    # The rules of --check: an ExpCast kernel's step with the two rows' EX2
    # passes; one more EX2, an F2I or I2F (not F2IP or I2FP) or a spill fails,
    # and a third I2FP where the dots are integers (no Q smoothing); so does a
    # control kernel without its per-element exponentials.
    def kernel(extra=(), ex2=2):
        lines = [line(0x10, "IGMMA.64x128x32.S8.S8 R92, gdesc[UR16], RZ, !UPT, gsb0", 2)]
        lines += [line(0x20 + 0x10 * i, "MUFU.EX2 R%d, R%d" % (i, i), 2) for i in range(ex2)]
        lines += [line(0x1000 + 0x10 * i, text, 2) for i, text in enumerate(extra)]
        return "\n".join(lines + [line(0x2000, "@!P0 BRA 0x10", 5), line(0x2010, "EXIT", 5)])
    vc, sage2 = "vc_attention_kernelILi128ELb1ELb1ELb0Ef", "vc_attention_kernelILi128ELb0ELb0ELb0Ef"
    vc_qsmooth = "vc_attention_kernelILi128ELb1ELb1ELb1Ef"
    cases = [([(vc, kernel()), (sage2, kernel(ex2=64))], 0),
             ([(vc, kernel(ex2=3)), (sage2, kernel(ex2=64))], 1),
             ([(vc, kernel(["F2I.S32 R1, R2"])), (sage2, kernel(ex2=64))], 1),
             ([(vc_qsmooth, kernel(["I2F.F32.S32 R1, R2", "I2FP.F32.S32 R3, R4"])), (sage2, kernel(ex2=64))], 1),
             ([(vc_qsmooth, kernel(["I2FP.F32.S32 R3, R4", "F2IP.U8.F32.NTZ R5, R6, R7, RZ"])),
               (sage2, kernel(ex2=64))], 0),
             ([(vc, kernel(["VIADD R3, R4, 0x4b400000", "F2IP.U8.F32.NTZ R5, R6, R7, RZ"])), (sage2, kernel(ex2=64))], 0),
             ([(vc, kernel(["I2FP.F32.S32 R3, R4"] * 2)), (sage2, kernel(ex2=64))], 0),
             ([(vc, kernel(["I2FP.F32.S32 R3, R4"] * 3)), (sage2, kernel(ex2=64))], 1),
             ([(vc, kernel(["STL [R1], R2"])), (sage2, kernel(ex2=64))], 1),
             ([(vc, kernel()), (sage2, kernel(ex2=8))], 1)]
    for funcs, violations in cases:
        bad, expcast = check_rules(funcs)
        if len(bad) != violations or expcast != 1:
            sys.exit("self-test failed: the rules gave %r" % (bad,))
    print("sass_tile_step self-test: passed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?")
    ap.add_argument("--kernel", default=DEFAULT_KERNEL)
    ap.add_argument("--self-test", action="store_true", help="check the parsing on a made-up listing (no cuobjdump)")
    ap.add_argument("--check", metavar="LIB", help="the machine-code rules over a built library (exit 77: skipped)")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if args.check:
        return check(args.check)
    if not find_cuobjdump():
        sys.exit("needs cuobjdump and nvdisasm: the toolkit's, or pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")
    with tempfile.TemporaryDirectory() as tmp:
        name, body = kernel_sass(args.file or compile_default(tmp), args.kernel)
    found = split(body)
    if found is None:
        sys.exit("no loop with a wgmma in %s" % name)
    length, waits, parts = found
    print("%s\n  main loop: %d instructions a tile step; highest register R%d; %d waits (WARPGROUP.DEPBAR)"
          % (name, length, max(int(r) for r in re.findall(r"\bR(\d+)\b", body)), waits))
    if parts:
        print("  (stall: the cycles ptxas holds the warp for fixed-latency dependences; waits: instructions that\n"
              "   also wait on a scoreboard, for a variable-latency result: shuffles, MUFU, shared memory, barriers)")
    for label, n, stall, scoreboard, counts in parts:
        top = ", ".join("%s %d" % kv for kv in counts.most_common(8))
        print("  %-34s %4d, stall %4d, waits %2d: %s" % (label, n, stall, scoreboard, top))
    mean = mean_step(instructions(body))
    if mean:
        print("  the step with the mean terms (one in eight), outside the tile step's loop: %d instructions, stall %d"
              % mean)


if __name__ == "__main__":
    main()
