"""Text-to-video with Wan2.1/2.2 in diffusers, attention through vcattn.

    python examples/wan_diffusers.py --model Wan-AI/Wan2.1-T2V-1.3B-Diffusers --prompt "a red fox in snow"

The three vcattn lines are marked; everything else is the stock pipeline.
"""
import argparse

import torch
from diffusers import AutoencoderKLWan, WanPipeline
from diffusers.utils import export_to_video

import vcattn.diffusers  # (1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="Wan-AI/Wan2.1-T2V-1.3B-Diffusers")
    ap.add_argument("--prompt", default="A cat walks on the grass, realistic")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--method", default="vc", help="vc (default), vsmooth or sage2")
    ap.add_argument("--out", default="wan_vcattn.mp4")
    args = ap.parse_args()

    vae = AutoencoderKLWan.from_pretrained(args.model, subfolder="vae", torch_dtype=torch.float32)
    pipe = WanPipeline.from_pretrained(args.model, vae=vae, torch_dtype=torch.bfloat16).to("cuda")
    vcattn.diffusers.enable(pipe, method=args.method)  # (2) the step count comes from the pipeline
    frames = pipe(prompt=args.prompt, height=480, width=832, num_frames=81,
                  num_inference_steps=args.steps, guidance_scale=5.0).frames[0]
    vcattn.diffusers.disable(pipe)  # (3) optional: back to diffusers' attention
    export_to_video(frames, args.out, fps=16)


if __name__ == "__main__":
    main()
