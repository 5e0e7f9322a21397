"""A Wan2.2-14B-sized diffusers transformer with few blocks (2 by default;
random BF16 weights, 720p / 81 frames = 75,600 tokens) under torch.compile,
as users run it: ms per forward, eager and compiled, for diffusers' native
backend (cuDNN SDPA), SageAttention2's "sage" backend (when importable) and
vcattn's drop-in backend ("vcattn"); then vcattn with the grouping schedule
(vcattn.diffusers.set_backend) over a whole compiled generation (k-means on
steps 0, 4, 8 of 40), averaged per step against the compiled drop-in; then
mode="reduce-overhead" (CUDA graphs) for both vcattn backends, checked
against the default mode's output. One process, medians, the card named.

    python bench/bench_compile.py [--layers 2] [--steps 40] [--reps 3] [--json F]
    python bench/bench_compile.py --layers 40 --regional --backends sage,vcattn --no-schedule
        # the whole 40-block step, each block compiled once and reused (diffusers'
        # compile_repeated_blocks, its advice for large models), backends' rows only
    python bench/bench_compile.py --tiny --device cpu     # smoke run of the script itself
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from needs import cuda_or_exit, torch_or_exit  # noqa: E402

torch = torch_or_exit("bench_compile", cuda=False)
import vcattn.diffusers as vd  # noqa: E402
from bench_transformer import build  # noqa: E402
from timing import median_ms  # noqa: E402


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--tiny", action="store_true", help="a 2-block tiny model on small latents (script check)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--json", default=None)
    ap.add_argument("--backends", default="native,sage,vcattn", help="comma-separated, of native, sage, vcattn")
    ap.add_argument("--regional", action="store_true",
                    help="compile the repeated blocks (diffusers' compile_repeated_blocks) instead of the whole model")
    ap.add_argument("--no-schedule", action="store_true",
                    help="only the backends' eager and compiled rows (no grouping schedule, no CUDA graphs)")
    args = ap.parse_args()
    cuda_or_exit("bench_compile", args.device)
    from diffusers.models import attention_dispatch as ad
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model, x, text, tokens = build("tiny" if args.tiny else "wan2.2-14b", args.device, args.layers)
    card = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    row = {"card": card, "layers": args.layers, "tokens": tokens, "torch": torch.__version__, "steps": args.steps}

    def forward(fn, t=500.0):
        with torch.no_grad():
            return fn(x, timestep=torch.tensor([t], device=args.device), encoder_hidden_states=text,
                      return_dict=False)[0]

    def reset():
        torch._dynamo.reset()
        model.reset_attention_backend()
        ad._AttentionBackendRegistry.set_active_backend(ad.AttentionBackendName.NATIVE)

    def timed(label, fn):
        t0 = time.perf_counter()
        out = forward(fn).clone()  # compiles; a CUDA graph overwrites its output on the next replay
        compile_s = time.perf_counter() - t0
        ms = median_ms(lambda: forward(fn), args.reps, args.device, warmup=1)
        row[label + "_ms"] = ms
        print("%-28s %8.1f ms  (first call %.0f s)" % (label, ms, compile_s), flush=True)
        return out

    def compiled():
        if not args.regional:
            return torch.compile(model)
        model.compile_repeated_blocks()
        return model

    def uncompile():  # undoes compile_repeated_blocks (Module.compile keeps its compiled call here)
        for module in model.modules():
            module._compiled_call_impl = None

    backends = [b for b in ("native", "sage", "vcattn") if b in args.backends.split(",")]
    if "sage" in backends:
        try:
            import sageattention  # noqa: F401 (diffusers' "sage" backend needs it)
        except ImportError:
            print("SageAttention2 not importable: no sage rows")
            backends.remove("sage")
    row["regional"] = args.regional
    outs = {}
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION] if args.device == "cuda" else [SDPBackend.MATH]):
        for backend in backends:
            reset()
            model.set_attention_backend(backend)
            timed(backend + " eager", model)
            outs[backend] = timed(backend + " compiled", compiled())
            if args.regional:
                uncompile()
        reset()
        if args.no_schedule:
            return report(row, card, args)

        # the grouping schedule over one compiled generation, per step against the compiled drop-in
        def generation(fn):
            handle = vd.set_backend(model, num_inference_steps=args.steps)
            try:
                timesteps = torch.linspace(1000, 1, args.steps).tolist()
                forward(fn, timesteps[-1])  # compiles; the rising timestep after it starts the timed generation
                if args.device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                for t in timesteps:
                    forward(fn, t)
                if args.device == "cuda":
                    torch.cuda.synchronize()
                per_step = 1e3 * (time.perf_counter() - t0) / args.steps
                return per_step, sorted((k[1], s, kind) for k, s, kind in handle.groupings)
            finally:
                vd.disable(model)
                torch._dynamo.reset()

        per_step, groupings = generation(torch.compile(model))
        row["vcattn_schedule_compiled_ms_per_step"] = per_step
        row["schedule_groupings"] = len(groupings)
        print("%-28s %8.1f ms a step over %d steps (%d groupings), %.3f x the compiled drop-in"
              % ("vcattn schedule compiled", per_step, args.steps, len(groupings),
                 per_step / row["vcattn compiled_ms"]), flush=True)

        # CUDA graphs
        for label, mode in (("vcattn reduce-overhead", "reduce-overhead"),):
            reset()
            model.set_attention_backend("vcattn")
            try:
                out = timed(label, torch.compile(model, mode=mode))
                row[label + "_vs_default"] = rel(out, outs["vcattn"])
                print("%-28s output vs default mode: relative difference %.2e" % ("", row[label + "_vs_default"]))
            except Exception as e:
                row[label + "_error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
                print("%-28s FAILED: %s" % (label, row[label + "_error"]), flush=True)
        reset()
        try:
            per_step_ro, groupings_ro = generation(torch.compile(model, mode="reduce-overhead"))
            row["vcattn_schedule_reduce_overhead_ms_per_step"] = per_step_ro
            row["schedule_reduce_overhead_groupings_match"] = groupings_ro == groupings
            print("%-28s %8.1f ms a step, groupings %s the default mode's" % (
                "vcattn schedule reduce-ovh", per_step_ro, "equal to" if groupings_ro == groupings else "DIFFER from"))
        except Exception as e:
            row["schedule_reduce_overhead_error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0])
            print("vcattn schedule reduce-overhead FAILED: %s" % row["schedule_reduce_overhead_error"], flush=True)

    report(row, card, args)


def report(row, card, args):
    print("%s, %d blocks, %d tokens, torch %s%s" % (card, args.layers, row["tokens"], torch.__version__,
                                                  ", regional compile" if args.regional else ""))
    for mode in ("eager", "compiled"):
        ms = {k[:-len(" %s_ms" % mode)]: v for k, v in row.items() if k.endswith(" %s_ms" % mode)}
        if "vcattn" in ms:
            print("%s: vcattn %s" % (mode, ", ".join("%.2fx %s" % (ms[b] / ms["vcattn"], b)
                                                  for b in ("sage", "native") if b in ms) or "alone"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=1)


if __name__ == "__main__":
    main()
