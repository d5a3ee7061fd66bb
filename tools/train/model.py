"""A small llama-architecture transformer in torch, matching Pagoda's forward.

RMSNorm y = x / sqrt(mean(x^2) + eps) * w; attention with GQA (query head h
reads kv head h // (n_head / n_kv_head)), scale 1/sqrt(head_dim); RoPE in
GGML's "norm" (interleaved) form: pairs (x[2i], x[2i+1]) rotate by
pos * base^(-2i/head_dim), so weights export without permutation; SwiGLU FFN
down(silu(gate(x)) * up(x)); tied input/output embeddings.
"""
import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass
class Config:
    n_vocab: int = 4096
    n_ctx: int = 256
    n_embd: int = 256
    n_layer: int = 6
    n_head: int = 8
    n_kv_head: int = 4
    n_ff: int = 704
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self):
        return self.n_embd // self.n_head


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg, n_pos):
    hd = cfg.head_dim
    inv = cfg.rope_base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.arange(n_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()  # [n_pos, hd/2]


def apply_rope(x, cos, sin):
    """x: [B, H, T, hd]; rotates interleaved pairs (x0, x1)."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    y0 = x0 * cos - x1 * sin
    y1 = x0 * sin + x1 * cos
    return torch.stack((y0, y1), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d, hd = cfg.n_embd, cfg.head_dim
        self.attn_norm = RMSNorm(d, cfg.norm_eps)
        self.wq = nn.Linear(d, cfg.n_head * hd, bias=False)
        self.wk = nn.Linear(d, cfg.n_kv_head * hd, bias=False)
        self.wv = nn.Linear(d, cfg.n_kv_head * hd, bias=False)
        self.wo = nn.Linear(cfg.n_head * hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, cfg.norm_eps)
        self.w_gate = nn.Linear(d, cfg.n_ff, bias=False)
        self.w_up = nn.Linear(d, cfg.n_ff, bias=False)
        self.w_down = nn.Linear(cfg.n_ff, d, bias=False)

    def forward(self, x, cos, sin, mask):
        cfg = self.cfg
        B, T, _ = x.shape
        hd = cfg.head_dim
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, cfg.n_head, hd).transpose(1, 2)
        k = self.wk(h).view(B, T, cfg.n_kv_head, hd).transpose(1, 2)
        v = self.wv(h).view(B, T, cfg.n_kv_head, hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = cfg.n_head // cfg.n_kv_head
        if rep > 1:  # kv head j serves query heads j*rep .. j*rep+rep-1
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, cfg.n_head * hd)
        x = x + self.wo(o)
        h = self.ffn_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_embd = nn.Embedding(cfg.n_vocab, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.out_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        cos, sin = rope_tables(cfg, cfg.n_ctx)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        mask = torch.ones(cfg.n_ctx, cfg.n_ctx, dtype=torch.bool).triu(1)
        self.register_buffer("mask", mask, persistent=False)
        self.apply(self._init)
        for b in self.blocks:  # scaled init of residual projections
            std = 0.02 / math.sqrt(2 * cfg.n_layer)
            nn.init.normal_(b.wo.weight, std=std)
            nn.init.normal_(b.w_down.weight, std=std)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def n_params(self):
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx):
        T = idx.shape[1]
        x = self.tok_embd(idx)
        cos, sin = self.cos[:T], self.sin[:T]
        for b in self.blocks:
            x = b(x, cos, sin, self.mask)
        return self.out_norm(x) @ self.tok_embd.weight.t()  # tied output
