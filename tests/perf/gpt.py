"""A small GPT for FLOP counts: byte vocabulary, learned positions, pre-norm blocks with
causal attention written as two matmuls, an untied head. Its shape keeps the terms 6ND
leaves out small (attention's ``T x d`` matmuls against the weights' ``d x d``, the
embeddings that do no matmul), so a counted step lands within about 2 % of 6ND.

Also the source of a training script (``SCRIPT``) that ranks of a real job run."""

from __future__ import annotations

import math

import torch
from torch import nn

VOCAB, CONTEXT = 256, 32


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (a.transpose(1, 2) for a in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        attended = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + self.proj(attended.transpose(1, 2).reshape(b, t, d))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


class Gpt(nn.Module):
    def __init__(self, width: int = 512, layers: int = 4, heads: int = 8) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, width)
        self.positions = nn.Embedding(CONTEXT, width)
        self.blocks = nn.Sequential(*(Block(width, heads) for _ in range(layers)))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1]))
        return self.head(self.norm(self.blocks(x)))


def parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, ids: torch.Tensor) -> None:
    """One step: next-byte loss, backward, optimizer."""
    logits = model(ids[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def batch(size: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``size`` sequences of CONTEXT + 1 bytes (inputs and their next bytes)."""
    return torch.randint(0, VOCAB, (size, CONTEXT + 1), generator=generator)
