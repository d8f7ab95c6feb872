"""Counter-based random numbers: the same bits on every device.

`RandomStream(key, device)` is SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom
number generators", OOPSLA 2014; its output function is Stafford's "Mix13" finalizer): draw
number c of the stream is

    z = key + (c + 1) * 0x9E3779B97F4A7C15          (mod 2^64)
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    bits = z ^ (z >> 31)

which is the c-th output of a SplitMix64 generator seeded with `key` (it passes BigCrush and
seeds the xoshiro generators). Draw c depends on (key, c) alone, so any element of any draw
can be computed on its own, in any order, on any device. The stream evaluates the formula with
int64 tensor ops only (wrapping multiply and add, xor, shifts), which are exact on CPU and CUDA
alike, so a batch is bit for bit the same on every device and thread count; torch's own
generators cannot give that (CUDA's Philox and the CPU's Mersenne Twister differ). A draw
costs about a dozen elementwise int64 tensor operations, whatever its size; `uniform`,
`integers` and `permutations` turn its bits into floats, bounded integers and permutations.

Every draw takes the next block of counters (one per element of its full shape, row-major), so
successive draws are independent. `rows=(start, stop)` computes only rows start:stop of the
first dimension of a draw and still advances the stream by the full shape: a data-parallel rank
draws its slice of the global batch without drawing the rest.

Two streams with different keys run through the same cycle of 2^64 states at offsets that differ
by a pseudo-random 64-bit amount; draws of the two overlap only if their counter ranges come
within that offset of each other (probability about 2^-40 for two streams of 2^23 draws).
"""

from __future__ import annotations

import math

import torch

_MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    """A 64-bit constant as the int64 with the same two's-complement bits."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN_GAMMA = _signed(0x9E3779B97F4A7C15)
_MIX_1 = _signed(0xBF58476D1CE4E5B9)
_MIX_2 = _signed(0x94D049BB133111EB)
MAX_INTEGERS_N = 1 << 62
"""the largest n that `integers` accepts"""


def _logical_shift_right(z: torch.Tensor, shift: int) -> torch.Tensor:
    """z >> shift filling with zeros: int64 `>>` copies the sign bit, the mask clears it."""
    return (z >> shift) & ((1 << (64 - shift)) - 1)


def splitmix64(key: int, counters: torch.Tensor) -> torch.Tensor:
    """The SplitMix64 outputs number `counters` (int64, overwritten) of the generator seeded
    with `key`, as int64 tensors holding the 64 bits."""
    z = counters.mul_(_GOLDEN_GAMMA).add_(_signed(key + _GOLDEN_GAMMA))  # key + (c+1)*gamma, mod 2^64
    z ^= _logical_shift_right(z, 30)
    z.mul_(_MIX_1)
    z ^= _logical_shift_right(z, 27)
    z.mul_(_MIX_2)
    z ^= _logical_shift_right(z, 31)
    return z


class RandomStream:
    """The random bits of one batch (or one piece of setup), drawn on `device`.

    key: any integer (use `hyla.tasks.base.stable_seed(...)` of what the numbers are for).
    `bits` draws a tensor of the full `shape` (or its `rows=(start, stop)` slice of the first
    dimension) and advances the stream past the full shape; `uniform`, `integers` and
    `permutations` turn bits into the numbers a task needs. Drawing everything a batch needs in
    one `bits` call and converting slices of it keeps the op count low (each draw costs about a
    dozen tensor ops, whatever its size).
    """

    def __init__(self, key: int, device: torch.device | str = "cpu"):
        self.key, self.device, self.offset = key, torch.device(device), 0

    def bits(self, shape: tuple[int, ...], rows: tuple[int, int] | None = None) -> torch.Tensor:
        """64 random bits per element, as int64 (any value, the sign included)."""
        shape = tuple(shape)
        if not shape or min(shape) < 0:
            raise ValueError(f"a draw needs a shape of at least one non-negative size, got {shape}")
        start, stop = rows if rows is not None else (0, shape[0])
        if not 0 <= start <= stop <= shape[0]:
            raise ValueError(f"rows ({start}, {stop}) outside the first dimension of {shape}")
        inner = math.prod(shape[1:])
        first = self.offset + start * inner
        counters = torch.arange(first, first + (stop - start) * inner, dtype=torch.int64, device=self.device)
        self.offset += math.prod(shape)
        return splitmix64(self.key, counters).view(stop - start, *shape[1:])


def uniform(bits: torch.Tensor) -> torch.Tensor:
    """float32 uniform on [0, 1) from random bits: the top 24 bits times 2^-24, so every value
    is exact."""
    return _logical_shift_right(bits, 40).to(torch.float32).mul_(2.0**-24)


def integers(bits: torch.Tensor, n: int) -> torch.Tensor:
    """int64 uniform on {0, ..., n-1} from random bits: floor(r * n / 2^62) of their top 62 bits
    r, computed exactly in int64 with 31-bit limbs. Each value has probability floor or ceil of
    2^62 / n over 2^62: a relative bias below n / 2^62 (under 1e-9 for n < 4e9)."""
    if not 1 <= n <= MAX_INTEGERS_N:
        raise ValueError(f"integers needs 1 <= n <= 2^62, got {n}")
    r = _logical_shift_right(bits, 2)  # 62 bits
    low_mask = (1 << 31) - 1
    r_high, r_low = r >> 31, r & low_mask  # both < 2^31
    n_high, n_low = n >> 31, n & low_mask
    # r*n / 2^62 = r_high*n_high + (middle * 2^31 + r_low*n_low) / 2^62; every product below is
    # < 2^62 and every sum < 2^63, so nothing overflows
    middle = r_high * n_low + r_low * n_high if n_high else r_high * n_low
    result = (middle + ((r_low * n_low) >> 31)) >> 31
    return result + r_high * n_high if n_high else result


def permutations(bits: torch.Tensor) -> torch.Tensor:
    """int64 random permutations of 0..k-1 along the last dimension (size k) from random bits:
    their stable argsort (ties, of probability ~ k^2 / 2^65, keep index order on every
    device)."""
    return bits.argsort(dim=-1, stable=True)
