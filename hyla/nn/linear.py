"""`linear_group`: several linear layers applied to one input as one matmul. Plain public PyTorch only."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def linear_group(x: torch.Tensor, layers: list[nn.Linear]) -> list[torch.Tensor]:
    """[layer(x) for layer in layers] as one matmul: the layers' weights stacked along the outputs
    (one call instead of several small ones, forward and backward; the gradient with respect to x
    is summed inside that matmul). Equal to the separate calls up to rounding."""
    if len(layers) == 1:
        return [layers[0](x)]
    biases = [layer.bias for layer in layers]
    if any(b is None for b in biases) and not all(b is None for b in biases):
        return [layer(x) for layer in layers]
    weight = torch.cat([layer.weight for layer in layers])  # [sum of outputs, K]
    bias = None if biases[0] is None else torch.cat(biases)
    y = F.linear(x, weight, bias)  # [..., sum of outputs]
    return list(y.split([layer.out_features for layer in layers], dim=-1))
