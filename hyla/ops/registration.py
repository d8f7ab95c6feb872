"""hyla's own operators (`torch.ops.hyla.*`) for torch.compile, registered in one way.

torch.compile cannot trace a ctypes call: the C++ HYLA kernel (`hyla.ops.kernels.cpp`) runs as
opaque operators while compiled code is traced. They use the low-level torch.library API rather
than torch.library.custom_op, which imports torch._dynamo (and triton with it) on its first call and
adds Python to every call. (The Triton kernels use custom_op: they import triton anyway.)
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def register_operator(name: str, schema: str, cpu_kernel: Callable, fake_kernel: Callable) -> None:
    """Define `torch.ops.hyla.<name>` with `schema` (e.g. "(Tensor x, Tensor? bias) -> Tensor"), run
    on the CPU by `cpu_kernel`; `fake_kernel` gives torch.compile the outputs' shapes and dtypes.

    Call it on first use, not at import. Once defined, an operator stays for the process (torch.library
    keeps it), so a reloaded or re-imported hyla finds it and leaves it; other code may define
    hyla:: operators too.
    """
    if hasattr(torch.ops.hyla, name):
        return
    qualified_name = f"hyla::{name}"
    torch.library.define(qualified_name, schema)
    torch.library.impl(qualified_name, "CPU", cpu_kernel)
    torch.library.register_fake(qualified_name, fake_kernel)
