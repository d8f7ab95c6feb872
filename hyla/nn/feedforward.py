"""Feed-forward layers: GELU MLP, SwiGLU, and a top-k mixture of experts of either."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from hyla.ops.kernels import gelu
from hyla.ops.torch_internals import switched_off

FEEDFORWARDS = ("gelu_mlp", "swiglu")


def gelu_tanh(x: torch.Tensor, kernel: bool = True) -> torch.Tensor:
    """GELU, tanh approximation: 0.5 x (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3).

    Under torch.compile it is written as the identical x * sigmoid(2z): inductor's CPU code for
    tanh is several times slower than for sigmoid (docs/speed.md; HYLA_GELU_SIGMOID=0 keeps
    aten's kernel). Eagerly, on a float32 CPU tensor, it is hyla's C++ GELU kernel
    (hyla.ops.kernels.gelu; HYLA_GELU_KERNEL=0 or kernel=False: aten's); else aten's kernel.
    """
    if torch.compiler.is_compiling():
        if switched_off("gelu_sigmoid"):
            return F.gelu(x, approximate="tanh")
        return x * torch.sigmoid(math.sqrt(8 / math.pi) * (x + 0.044715 * x * x * x))
    if kernel and gelu.takes(x):
        return gelu.gelu_tanh_cpp(x)
    return F.gelu(x, approximate="tanh")


class GeluMLP(nn.Module):
    """Linear(D -> mlp_dim) -> GELU (tanh approximation) -> Linear(mlp_dim -> D).
    `gelu_kernel = False`: GELU is never the C++ kernel (an autograd Function that
    `torch.func.vmap` cannot batch; packed training sets it)."""

    def __init__(self, dim: int, mlp_dim: int):
        super().__init__()
        self.up, self.down = nn.Linear(dim, mlp_dim), nn.Linear(mlp_dim, dim)
        self.gelu_kernel = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(gelu_tanh(self.up(x), self.gelu_kernel))


class SwiGLU(nn.Module):
    """(silu(W1 x) * W2 x) W3, no biases."""

    def __init__(self, dim: int, mlp_dim: int):
        super().__init__()
        self.gate = nn.Linear(dim, mlp_dim, bias=False)
        self.up = nn.Linear(dim, mlp_dim, bias=False)
        self.down = nn.Linear(mlp_dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


def make_feedforward(kind: str, dim: int, mlp_dim: int) -> nn.Module:
    if kind == "gelu_mlp":
        return GeluMLP(dim, mlp_dim)
    if kind == "swiglu":
        return SwiGLU(dim, mlp_dim)
    raise ValueError(f"unknown feedforward {kind!r}; valid: {', '.join(FEEDFORWARDS)}")


class MixtureOfExperts(nn.Module):
    """E experts, each a feed-forward of the usual size; a linear router picks the top-k per token
    and mixes their outputs with a softmax over the k chosen logits (paper: E=5, k=2).

    Two forms of the same function, equal up to float rounding:
    - routed (on the CPU): each expert runs on the tokens routed to it, k/E of the dense work;
    - dense (elsewhere, or `routed = False`): every expert on every token, weight 0 where not
      chosen. Its shapes do not depend on the routing, as CUDA graphs and `torch.func.vmap` need
      (packed training sets `routed = False`).
    """

    def __init__(self, kind: str, dim: int, mlp_dim: int, num_experts: int, top_k: int):
        super().__init__()
        if not 1 <= top_k <= num_experts:
            raise ValueError(f"top_k must be in 1..num_experts={num_experts}, got {top_k}")
        self.top_k = top_k
        self.routed = True
        self.router = nn.Linear(dim, num_experts, bias=False)
        self.experts = nn.ModuleList(make_feedforward(kind, dim, mlp_dim) for _ in range(num_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.router(x)  # [..., E]
        top_logits, top_index = logits.topk(self.top_k, dim=-1)  # [..., k]
        weights = torch.softmax(top_logits, dim=-1)  # [..., k]
        if self.routed and x.device.type == "cpu":
            return self._routed(x, top_index, weights)
        gates = torch.zeros_like(logits).scatter(-1, top_index, weights)  # [..., E]
        outputs = torch.stack([expert(x) for expert in self.experts], dim=-1)  # [..., D, E]
        return (outputs * gates.unsqueeze(-2)).sum(-1)

    def _routed(self, x: torch.Tensor, top_index: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Each expert on the tokens routed to it only (a graph break under torch.compile: the
        number of tokens per expert depends on the data)."""
        flat = x.reshape(-1, x.shape[-1])  # [N, D]
        top_index, weights = top_index.reshape(-1, self.top_k), weights.reshape(-1, self.top_k)  # [N, k]
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, choice = (top_index == e).nonzero(as_tuple=True)  # the tokens routed to expert e
            out = out.index_add(0, token, expert(flat[token]) * weights[token, choice, None])
        return out.view_as(x)
