"""What hyla's library uses of PyTorch beyond its public API, in one place (why: docs/speed.md).

    constant_under_compile
                      torch.compiler.assume_constant_result's mark, so that torch.compile calls the
                      C++ kernel's and Triton's availability checks once while tracing (they may
                      compile or query the device) instead of tracing into them; set directly
                      because the decorator imports torch._dynamo at hyla's import. The
                      switches (`switched_off`, `forced_on`) are read through it too, so that
                      compiled code neither traces into the switch record nor guards on it.

Beyond the library, hyla's AdamW step calls torch's fused AdamW kernel directly
(`hyla.train.optim.fused_adamw_step`). hyla runs on any PyTorch from 2.6 on.
"""

from __future__ import annotations

from hyla.utils import switches


def constant_under_compile(fn):
    """Mark `fn` as torch.compiler.assume_constant_result does: torch.compile calls it once while
    tracing and keeps its result as a constant. Sets the mark directly (the attribute torch's
    decorator sets) because the decorator imports torch._dynamo (a second, and triton with it) at
    hyla's import; tests/ops/test_attention.py compiles a call through it with fullgraph=True."""
    fn._dynamo_marked_constant = True
    return fn


@constant_under_compile  # the switches do not change within a process
def switched_off(switch: str) -> bool:
    """`hyla.utils.switches().off(switch)`, callable from compiled code."""
    return switches().off(switch)


@constant_under_compile
def forced_on(switch: str) -> bool:
    """`hyla.utils.switches().forced(switch)`, callable from compiled code."""
    return switches().forced(switch)
