"""What hyla uses of PyTorch beyond its public API is optional: importing hyla probes and registers
nothing (the direct fused-AdamW kernel call and its off switch are tested in
tests/train/test_optim.py), and registering a `torch.ops.hyla` operator survives a reloaded module
and another library using the `hyla` namespace."""

import subprocess
import sys
import textwrap


def _run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_import_is_inert_and_an_operator_survives_reload_reimport_and_a_foreign_hyla_namespace():
    out = _run_python("""
        import importlib, sys, torch
        other = torch.library.Library("hyla", "FRAGMENT")  # another library's op in the same namespace
        other.define("twice(Tensor x) -> Tensor")
        other.impl("twice", lambda x: 2 * x, "CPU")
        import hyla, hyla.ops.registration as registration, hyla.train.optim as optim
        # import: no kernel probed, no operator of hyla's registered
        print(optim._fused_adamw_works.cache_info().currsize, hasattr(torch.ops.hyla, "cpp_forward"))
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
