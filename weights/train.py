"""Train the small shipped models with PyTorch and export them to minillm's `.npz` format.

PyTorch is needed only here, to make the files; minillm itself never imports it. The two
architectures below compute exactly what ``minillm.Model.forward`` computes (docs/FORMAT.md):

* classic (GPT-2 style): ``x = E[t] + P[pos]``; per block
  ``x += Out(attn(LN(x)))``, ``x += Down(gelu(Up(LN(x))))`` (exact erf GELU, biases);
  ``logits = LN(x) @ W_head.T``.
* modern (Llama style): ``x = E[t]``; per block ``x += Out(attn(rope(RMSNorm(x))))``,
  ``x += Down(silu(Gate(h)) * Up(h))`` with ``h = RMSNorm(x)``; ``logits = RMSNorm(x) @ E.T``
  (tied). RMSNorm is ``x / sqrt(mean(x**2) + eps) * g``; RoPE is the half-split layout;
  query head ``i`` reads key/value head ``i // (n_heads // n_kv_heads)``.

Training: AdamW (beta 0.9, 0.95, weight decay 0.1 on matrices), linear warm-up for 100 steps
to the peak learning rate then cosine decay to 10% of it, batches of 16 random windows of 256
tokens from the training text (books separated by ``<|endoftext|>``), gradient norm clipped
to 1. The draft is distilled: its loss is the cross-entropy to the target's next-token
distribution at every position (KL(target || draft) plus a constant) instead of to the text's
next token, since a drafter is only as useful as its agreement with the target. Everything is
seeded; with the same machine, PyTorch build and thread count a run gives the same file,
across machines it does not (floating-point summation order differs).

Usage (after ``prepare_corpus.py`` and ``train_tokenizer.py``)::

    python weights/train.py target --out weights/target.npz
    python weights/train.py draft --out weights/draft.npz
    python weights/train.py classic --out weights/classic.npz
"""

import argparse
import json
import math
import os
import time

# Threads that wait by sleeping, not spinning: on a machine shared with other jobs, spinning
# OpenMP threads made training five times slower. Set before torch loads OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

PRESETS = {
    "target": dict(config=dict(arch="modern", vocab_size=2048, context_length=256, d_model=128,
                               n_layers=6, n_heads=4, n_kv_heads=2, d_ff=352, norm_eps=1e-5,
                               rope_theta=10000.0, tie_embeddings=True, bias=False,
                               activation="silu"),
                   steps=1400),
    # One layer: on models this small a decode step costs about the same per layer whatever
    # the width, so the drafter's speed is set by its depth, and width buys agreement.
    "draft": dict(config=dict(arch="modern", vocab_size=2048, context_length=256, d_model=128,
                              n_layers=1, n_heads=4, n_kv_heads=2, d_ff=352, norm_eps=1e-5,
                              rope_theta=10000.0, tie_embeddings=True, bias=False,
                              activation="silu"),
                  steps=5000, teacher="target.npz"),
    "classic": dict(config=dict(arch="classic", vocab_size=2048, context_length=256,
                                d_model=128, n_layers=6, n_heads=4, n_kv_heads=4, d_ff=512,
                                norm_eps=1e-5, rope_theta=10000.0, tie_embeddings=False,
                                bias=True, activation="gelu"),
                    steps=1400),
}


# --------------------------------------------------------------------------- the models

def rms_norm(x, gain, eps):
    """``x / sqrt(mean(x**2) + eps) * gain`` over the last axis."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain


def rope_tables(length, head_dim, theta):
    """cos and sin of ``m * theta**(-2j/hd)`` for positions m < length, shape (length, hd/2)."""
    inv_freq = theta ** (-torch.arange(0, head_dim // 2, dtype=torch.float64) * 2 / head_dim)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cos(angles).float(), torch.sin(angles).float()


def apply_rope(x, cos, sin):
    """Rotate halves: ``[x1 cos - x2 sin, x2 cos + x1 sin]`` for x of shape (B, H, T, hd)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Block(nn.Module):
    """One pre-norm transformer block with the canonical minillm parameter names."""

    def __init__(self, cfg):
        super().__init__()
        d, h, k = cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"]
        hd = d // h
        classic = cfg["arch"] == "classic"
        norm = (lambda: nn.LayerNorm(d, eps=cfg["norm_eps"], bias=cfg["bias"])) if classic \
            else (lambda: RMSNorm(d))
        self.attn_norm, self.mlp_norm = norm(), norm()
        self.attn = nn.Module()
        self.attn.qkv = nn.Linear(d, (h + 2 * k) * hd, bias=cfg["bias"])
        self.attn.out = nn.Linear(h * hd, d, bias=cfg["bias"] and classic)
        self.mlp = nn.Module()
        if classic:
            self.mlp.up = nn.Linear(d, cfg["d_ff"], bias=cfg["bias"])
        else:
            self.mlp.gate_up = nn.Linear(d, 2 * cfg["d_ff"], bias=False)
        self.mlp.down = nn.Linear(cfg["d_ff"], d, bias=cfg["bias"] and classic)
        self.cfg, self.hd = cfg, hd

    def norm(self, layer, x):
        if isinstance(layer, RMSNorm):
            return rms_norm(x, layer.weight, self.cfg["norm_eps"])
        return layer(x)

    def forward(self, x, cos, sin):
        cfg, hd = self.cfg, self.hd
        b, t, _ = x.shape
        h, k = cfg["n_heads"], cfg["n_kv_heads"]
        qkv = self.attn.qkv(self.norm(self.attn_norm, x))
        q, kk, v = qkv.split([h * hd, k * hd, k * hd], dim=-1)
        q = q.view(b, t, h, hd).transpose(1, 2)
        kk = kk.view(b, t, k, hd).transpose(1, 2)
        v = v.view(b, t, k, hd).transpose(1, 2)
        if cfg["arch"] == "modern":
            q, kk = apply_rope(q, cos, sin), apply_rope(kk, cos, sin)
        if k != h:
            kk = kk.repeat_interleave(h // k, dim=1)
            v = v.repeat_interleave(h // k, dim=1)
        att = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
        x = x + self.attn.out(att.transpose(1, 2).reshape(b, t, h * hd))
        m = self.norm(self.mlp_norm, x)
        if cfg["arch"] == "classic":
            m = F.gelu(self.mlp.up(m))            # exact erf GELU
        else:
            gate, up = self.mlp.gate_up(m).chunk(2, dim=-1)
            m = F.silu(gate) * up
        return x + self.mlp.down(m)


class RMSNorm(nn.Module):
    """Holds the RMSNorm gain; the arithmetic is ``rms_norm`` above."""

    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))


class Transformer(nn.Module):
    """The whole decoder: embeddings, blocks, final norm and output layer."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d = cfg["d_model"]
        self.tok_emb = nn.Embedding(cfg["vocab_size"], d)
        if cfg["arch"] == "classic":
            self.pos_emb = nn.Embedding(cfg["context_length"], d)
            self.final_norm = nn.LayerNorm(d, eps=cfg["norm_eps"], bias=cfg["bias"])
        else:
            self.final_norm = RMSNorm(d)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg["n_layers"]))
        if not cfg["tie_embeddings"]:
            self.lm_head = nn.Linear(d, cfg["vocab_size"], bias=False)
        cos, sin = rope_tables(cfg["context_length"], d // cfg["n_heads"], cfg["rope_theta"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.init_weights()

    def init_weights(self):
        """GPT-2 initialisation: N(0, 0.02), residual outputs scaled by 1/sqrt(2 n_layers)."""
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 1:
                nn.init.ones_(p)
            elif name.endswith(("attn.out.weight", "mlp.down.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * self.cfg["n_layers"]))
            else:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tok_emb(ids)
        if self.cfg["arch"] == "classic":
            x = x + self.pos_emb.weight[:t]
        cos, sin = self.cos[:t], self.sin[:t]
        for layer in self.layers:
            x = layer(x, cos, sin)
        if isinstance(self.final_norm, RMSNorm):
            x = rms_norm(x, self.final_norm.weight, self.cfg["norm_eps"])
        else:
            x = self.final_norm(x)
        head = self.tok_emb.weight if self.cfg["tie_embeddings"] else self.lm_head.weight
        return x @ head.T


# --------------------------------------------------------------------------- data

def load_tokens(train_path, valid_path, tokenizer_path):
    """Token ids of the training books (joined by <|endoftext|>) and of the held-out text."""
    from tokenizers import Tokenizer
    tokenizer = Tokenizer.from_file(tokenizer_path)
    eos = tokenizer.token_to_id("<|endoftext|>")
    with open(train_path, encoding="utf-8") as f:
        books = json.load(f)
    train = []
    for encoding in tokenizer.encode_batch(books):
        train.extend(encoding.ids + [eos])
    with open(valid_path, encoding="utf-8") as f:
        valid = tokenizer.encode(f.read()).ids
    return np.array(train, dtype=np.int64), np.array(valid, dtype=np.int64)


def random_batch(tokens, batch_size, length, rng):
    """``batch_size`` random windows: inputs ``tokens[s:s+length]``, targets shifted by one."""
    starts = rng.integers(0, len(tokens) - length - 1, size=batch_size)
    rows = np.stack([tokens[s:s + length + 1] for s in starts])
    rows = torch.from_numpy(rows)
    return rows[:, :-1], rows[:, 1:]


def learning_rate(step, peak, warmup, total, floor=0.1):
    """Linear warm-up to ``peak``, then cosine decay to ``floor * peak`` at ``total``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def held_out_loss(model, tokens, window):
    """Mean cross-entropy (nats/token) over non-overlapping windows: every token after the
    first is predicted once, from at most ``window`` tokens of its own window."""
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(tokens) - 1, window):
        chunk = torch.from_numpy(tokens[start:start + window + 1])[None]
        logits = model(chunk[:, :-1])
        total += F.cross_entropy(logits[0].double(), chunk[0, 1:], reduction="sum").item()
        count += chunk.shape[1] - 1
    model.train()
    return total / count


# --------------------------------------------------------------------------- export

def export(model, path, tokenizer_json):
    """Write the model in minillm's `.npz` format (float32, canonical names, tokenizer)."""
    arrays = {
        "minillm.format_version": np.array(1),
        "minillm.config": np.array(json.dumps(model.cfg)),
        "minillm.tokenizer": np.array(tokenizer_json),
    }
    for name, tensor in model.state_dict().items():
        arrays[name] = tensor.detach().cpu().numpy().astype(np.float32)
    np.savez(path, **arrays)


def load_model(path):
    """A model written by export(), for distillation (inference only)."""
    with np.load(path) as f:
        model = Transformer(json.loads(str(f["minillm.config"])))
        model.load_state_dict({name: torch.from_numpy(f[name]) for name in model.state_dict()})
    return model.eval()


def parameter_count(model):
    return sum(p.numel() for p in model.parameters())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset", choices=sorted(PRESETS))
    parser.add_argument("--out", required=True)
    parser.add_argument("--train", default="/tmp/minillm-build/web_train.txt")
    parser.add_argument("--valid", default=os.path.join(HERE, "web_valid.txt"))
    parser.add_argument("--tokenizer", default=os.path.join(HERE, "tokenizer.json"))
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--teacher", default=None,
                        help="distil from this model's next-token distributions (default: the "
                             "preset's teacher, if any)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    preset = PRESETS[args.preset]
    cfg, steps = dict(preset["config"]), args.steps or preset["steps"]
    length = cfg["context_length"]

    train_tokens, valid_tokens = load_tokens(args.train, args.valid, args.tokenizer)
    with open(args.tokenizer, encoding="utf-8") as f:
        tokenizer_json = f.read()
    model = Transformer(cfg)
    teacher_path = args.teacher  # a path given here is relative to the working directory,
    if teacher_path is None and "teacher" in preset:  # a preset's to this folder
        teacher_path = os.path.join(HERE, preset["teacher"])
    teacher = None
    if teacher_path:
        teacher = load_model(teacher_path)
        print(f"distilling from {teacher_path}", flush=True)
    print(f"{args.preset}: {parameter_count(model):,} parameters, {len(train_tokens):,} "
          f"training tokens, {len(valid_tokens):,} held-out tokens, {steps} steps", flush=True)

    matrices = [p for p in model.parameters() if p.dim() >= 2]
    others = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": matrices, "weight_decay": 0.1},
                                   {"params": others, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95))
    started = time.time()
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args.lr, args.warmup, steps)
        inputs, targets = random_batch(train_tokens, args.batch_size, length, rng)
        logits = model(inputs).reshape(-1, cfg["vocab_size"])
        if teacher is None:
            loss = F.cross_entropy(logits, targets.reshape(-1))
        else:  # cross-entropy to the teacher's distribution: KL(teacher || student) + const
            with torch.no_grad():
                soft = F.softmax(teacher(inputs).reshape(-1, cfg["vocab_size"]), dim=-1)
            loss = F.cross_entropy(logits, soft)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step:5d}  loss {loss.item():.4f}  "
                  f"{time.time() - started:7.1f}s", flush=True)
    valid = held_out_loss(model, valid_tokens, length)
    print(f"held-out loss {valid:.4f} nats/token ({time.time() - started:.0f}s)", flush=True)
    export(model, args.out, tokenizer_json)
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
