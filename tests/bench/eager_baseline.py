#!/usr/bin/env python3
"""Eager PyTorch baseline for bench_model_shape: the same forward as Mismatch Lab's reference transformer
(Llama / Qwen2 / Qwen3: RMSNorm computed in float32, rotary embeddings, grouped-query attention with a KV cache
grown by concatenation, SwiGLU MLP, optional QKV bias and Qwen3 q/k norm, tied or untied lm_head), written the way
Hugging Face's eager modules write it, in plain torch ops. Greedy decoding of a batch of random prompts, lm_head on
the last position only (what `generate` does), so it is the strongest eager baseline, not a strawman.

Prints one JSON object on stdout (and to --json): load seconds, time to first token, prefill and decode tokens/s,
peak RSS. Decoding stops after --new-tokens or when --max-decode-seconds have passed (decode tokens/s is a per-step
rate: on a CPU without fast BF16 kernels, Debian's BF16 matmul runs ~10x slower than FP32 and a full run would take
many minutes).

    eager_baseline.py --model DIR --dtype bf16|fp32 [--batch 8] [--prompt-tokens 32] [--new-tokens 128]
                      [--threads 2] [--max-decode-seconds 60] [--device cpu|cuda:N] [--json PATH]
"""
import argparse
import json
import math
import mmap
import os
import resource
import struct
import sys
import time

import torch


def load_checkpoint(directory, dtype):
    index_path = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    dtypes = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
    for name in files:
        with open(os.path.join(directory, name), "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            (header_size,) = struct.unpack("<Q", mapped[:8])
            header = json.loads(mapped[8 : 8 + header_size])
            base = 8 + header_size
            for key, info in header.items():
                if key == "__metadata__":
                    continue
                begin, end = info["data_offsets"]
                raw = bytearray(mapped[base + begin : base + end])
                tensor = torch.frombuffer(raw, dtype=dtypes[info["dtype"]]).reshape(info["shape"])
                tensors[key] = tensor.to(dtype)
            mapped.close()
    return tensors


class Model:
    def __init__(self, config, weights, dtype, device="cpu"):
        self.c = config
        self.device = torch.device(device)
        weights = {name: tensor.to(self.device) for name, tensor in weights.items()}
        self.w = weights
        self.dtype = dtype
        self.layers = config["num_hidden_layers"]
        self.heads = config["num_attention_heads"]
        self.kv_heads = config["num_key_value_heads"]
        self.head_dim = config.get("head_dim") or config["hidden_size"] // self.heads
        self.eps = config["rms_norm_eps"]
        self.qk_norm = config["architectures"][0] == "Qwen3ForCausalLM"
        self.lm_head = weights["model.embed_tokens.weight"] if config.get("tie_word_embeddings") else weights["lm_head.weight"]
        self.inv_freq = self.rope_inverse_frequencies().to(self.device)

    def rope_inverse_frequencies(self):
        d = self.head_dim
        inv = 1.0 / (self.c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        scaling = self.c.get("rope_scaling") or {}
        if scaling.get("rope_type") == "llama3":
            factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
            original = scaling["original_max_position_embeddings"]
            low_wavelen, high_wavelen = original / low, original / high
            wavelen = 2 * math.pi / inv
            scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
            smooth = (original / wavelen - low) / (high - low)
            smoothed = (1 - smooth) * scaled / factor + smooth * scaled
            medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
            inv = torch.where(medium, smoothed, scaled)
        return inv.to(torch.float32)

    def norm(self, x, weight):
        wide = x.to(torch.float32)
        wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * wide.to(x.dtype)

    def rope(self, x, cos, sin):
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def linear(self, x, name, bias=False):
        b = self.w.get(name + ".bias") if bias else None
        return torch.nn.functional.linear(x, self.w[name + ".weight"], b)

    def forward(self, ids, cache, start):
        batch, length = ids.shape
        x = torch.nn.functional.embedding(ids, self.w["model.embed_tokens.weight"])
        positions = torch.arange(start, start + length, dtype=torch.float32, device=self.device)
        angles = torch.outer(positions, self.inv_freq)
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos().to(self.dtype), emb.sin().to(self.dtype)
        groups = self.heads // self.kv_heads
        scale = 1.0 / math.sqrt(self.head_dim)
        causal = None
        if length > 1:
            causal = torch.full((length, start + length), float("-inf"), device=self.device).triu(start + 1)
        for i in range(self.layers):
            p = "model.layers.%d." % i
            h = self.norm(x, self.w[p + "input_layernorm.weight"])
            bias = "model.layers.%d.self_attn.q_proj.bias" % i in self.w
            q = self.linear(h, p + "self_attn.q_proj", bias).view(batch, length, self.heads, self.head_dim)
            k = self.linear(h, p + "self_attn.k_proj", bias).view(batch, length, self.kv_heads, self.head_dim)
            v = self.linear(h, p + "self_attn.v_proj", bias).view(batch, length, self.kv_heads, self.head_dim)
            if self.qk_norm:
                q = self.norm(q, self.w[p + "self_attn.q_norm.weight"])
                k = self.norm(k, self.w[p + "self_attn.k_norm.weight"])
            q = self.rope(q.transpose(1, 2), cos, sin)
            k = self.rope(k.transpose(1, 2), cos, sin)
            v = v.transpose(1, 2)
            if cache[i] is not None:
                k = torch.cat((cache[i][0], k), dim=2)
                v = torch.cat((cache[i][1], v), dim=2)
            cache[i] = (k, v)
            # repeat_kv, as Hugging Face's eager attention does.
            keys = k[:, :, None].expand(batch, self.kv_heads, groups, k.shape[2], self.head_dim).reshape(
                batch, self.heads, k.shape[2], self.head_dim)
            values = v[:, :, None].expand(batch, self.kv_heads, groups, v.shape[2], self.head_dim).reshape(
                batch, self.heads, v.shape[2], self.head_dim)
            scores = torch.matmul(q, keys.transpose(2, 3)) * scale
            if causal is not None:
                scores = scores + causal.to(scores.dtype)
            probabilities = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            attended = torch.matmul(probabilities, values).transpose(1, 2).reshape(batch, length, -1)
            x = x + self.linear(attended, p + "self_attn.o_proj")
            h = self.norm(x, self.w[p + "post_attention_layernorm.weight"])
            gate = self.linear(h, p + "mlp.gate_proj")
            up = self.linear(h, p + "mlp.up_proj")
            x = x + self.linear(torch.nn.functional.silu(gate) * up, p + "mlp.down_proj")
        last = self.norm(x[:, -1:], self.w["model.norm.weight"])
        return torch.nn.functional.linear(last, self.lm_head).float()[:, -1]


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--dtype", choices=["bf16", "fp32"], required=True)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-decode-seconds", type=float, default=60.0)
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N (the weights and every step there)")
    parser.add_argument("--json")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    started = time.perf_counter()
    with open(os.path.join(args.model, "config.json")) as f:
        config = json.load(f)
    model = Model(config, load_checkpoint(args.model, dtype), dtype, args.device)
    cuda = model.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(model.device)
    load_seconds = time.perf_counter() - started

    generator = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 256, (args.batch, args.prompt_tokens), generator=generator).to(model.device)
    cache = [None] * model.layers
    begin = time.perf_counter()
    logits = model.forward(ids, cache, 0)
    if cuda:
        torch.cuda.synchronize(model.device)
    prefill_seconds = time.perf_counter() - begin
    position = args.prompt_tokens
    steps = 0
    begin = time.perf_counter()
    while steps + 1 < args.new_tokens and time.perf_counter() - begin < args.max_decode_seconds:
        token = logits.argmax(-1, keepdim=True)
        if cuda:
            token.cpu()  # each step's tokens reach the host (stop checks), as the engine's sampling does
        logits = model.forward(token, cache, position)
        position += 1
        steps += 1
    if cuda:
        torch.cuda.synchronize(model.device)
    decode_seconds = time.perf_counter() - begin
    result = {
        "device": str(model.device),
        "dtype": args.dtype,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "batch": args.batch,
        "prompt_tokens": args.prompt_tokens,
        "decode_steps": steps,
        "load_seconds": load_seconds,
        "time_to_first_token_seconds": load_seconds + prefill_seconds,
        "prefill_seconds": prefill_seconds,
        "prefill_tokens_per_second": args.batch * args.prompt_tokens / prefill_seconds,
        "decode_seconds": decode_seconds,
        "decode_tokens_per_second": args.batch * steps / decode_seconds if steps else 0.0,
        "peak_rss_bytes": peak_rss_bytes(),
    }
    text = json.dumps(result)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
