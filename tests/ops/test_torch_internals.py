"""What hyla uses of PyTorch beyond its public API is optional: importing hyla probes and registers
nothing, HYLA_PUBLIC_OPS turns off the direct fused-AdamW kernel call (the optimizer against torch's
with and without it: tests/train/test_optim.py), and registering a `torch.ops.hyla` operator
survives a reloaded module and another library using the `hyla` namespace."""

import subprocess
import sys
import textwrap

import pytest

from hyla.ops import torch_internals
from hyla.ops.torch_internals import PUBLIC_OPS_ENV, fused_adamw_available, public_ops_only


def _run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("value, public", [(None, False), ("", False), ("0", False), ("1", True), ("yes", True)])
def test_public_ops_switch_turns_off_the_fused_adamw_kernel(monkeypatch, value, public):
    if value is None:
        monkeypatch.delenv(PUBLIC_OPS_ENV, raising=False)
    else:
        monkeypatch.setenv(PUBLIC_OPS_ENV, value)
    assert public_ops_only() == public
    assert fused_adamw_available() == (not public and torch_internals._fused_adamw_works())


def test_import_is_inert_and_an_operator_survives_reload_reimport_and_a_foreign_hyla_namespace():
    out = _run_python("""
        import importlib, sys, torch
        other = torch.library.Library("hyla", "FRAGMENT")  # another library's op in the same namespace
        other.define("twice(Tensor x) -> Tensor")
        other.impl("twice", lambda x: 2 * x, "CPU")
        import hyla, hyla.ops.registration as registration
        from hyla.ops import torch_internals as ti
        # import: no kernel probed, no operator of hyla's registered
        print(ti._fused_adamw_works.cache_info().currsize, hasattr(torch.ops.hyla, "cpp_forward"))
        x = torch.randn(5, 3)

        def register(module):
            module.register_operator("thrice", "(Tensor x) -> Tensor", lambda x: 3 * x, lambda x: torch.empty_like(x))
            assert torch.equal(torch.ops.hyla.thrice(x), 3 * x)

        for _ in range(2):
            register(registration)
            registration = importlib.reload(registration)
        for name in [m for m in sys.modules if m.startswith("hyla")]:
            del sys.modules[name]  # a second, independent import
        import hyla.ops.registration as registration
        register(registration)
        print(torch.ops.hyla.twice(torch.ones(1)).item())
    """)
    assert out.split("\n")[:2] == ["0 False", "2.0"]
