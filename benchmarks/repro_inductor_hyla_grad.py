"""Stand-alone reproduction: HYLA's attention compiled by torch.compile, gradients against eager.

    python benchmarks/repro_inductor_hyla_grad.py                       # CUDA if present, SRAVEN's sizes, every setting
    python benchmarks/repro_inductor_hyla_grad.py --device cpu --batch 2 --seq 4 --heads 2 --dk 2 --dv 2
    python benchmarks/repro_inductor_hyla_grad.py --settings baseline split_reductions=False --out repro.json

Plain PyTorch, nothing from hyla: HYLA's attention (a linear hypernetwork attention) in the
broadcast-and-sum form that hyla once compiled for small heads (its `pointwise` implementation,
removed by the speed ledger), for one layer at the paper's SRAVEN sizes by default (B=64, 36
queries and keys, H=16 heads of Dk=Dv=4, a relative-position bias and an attention-dropout
keep-mask):

    s = <q, k> / sqrt(Dk) + bias                          [B, H, Tq, Tk]
    a = s / sqrt(mean_heads(s^2) + 1e-6)                  RMS normalization across the heads
    w = a * dropout_mask
    hidden[b, q, d, k] = relu(sum_h w[b,h,q,k] v[b,k,h,d])     the generated network's first layer
    out[b, q, h, d]    = sum_k w[b,h,q,k] hidden[b,q,d,k]      its second layer

written as broadcast products reduced over one axis, as hyla compiled it. For each setting, the
function is compiled (torch._dynamo reset before each) and its output and the gradients of q, k,
v and the bias under a fixed random upstream gradient are compared with a float64 eager
reference on the same inputs: in float32 (the compiled result must be about as close to the
reference as eager float32 is: error <= 10 x eager's + 1e-5 relative to the largest reference
entry) and in float64 (compiled float64 against eager float64, within 1e-9 relative).

Settings (`--settings`, default all): `baseline` (torch.compile as is), `backend=aot_eager` and
`backend=aot_eager_decomp_partition` (AOT autograd without inductor's code generation: if these
pass and `baseline` fails, the fault is in inductor's lowering or kernels), and inductor options
`NAME=VALUE` from `torch._inductor.config` (`fallback_random`, `split_reductions`,
`triton.persistent_reductions`, `aggressive_fusion`, `max_autotune`, `triton.mix_order_reduction`,
...). An option this torch does not have is reported as "absent". The JSON on stdout (and in
`--out`) lists each setting's errors and PASS / FAIL / ERROR.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time

import torch

RMS_EPS = 1e-6
DEFAULT_SETTINGS = [
    "baseline",
    "backend=aot_eager",
    "backend=aot_eager_decomp_partition",
    "fallback_random=True",
    "split_reductions=False",
    "triton.persistent_reductions=False",
    "aggressive_fusion=True",
    "triton.mix_order_reduction=False",
    "triton.multi_kernel=1",
    "max_autotune=True",
]
FLOAT32_FACTOR, FLOAT32_FLOOR, FLOAT64_TOLERANCE = 10.0, 1e-5, 1e-9


def hyla_attention(q, k, v, bias, keep):
    """q, k [B, T, H, Dk], v [B, T, H, Dv], bias [H, Tq, Tk], keep [Tq, Tk] -> out [B, Tq, H, Dv]."""
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1]) + bias
    a = s * torch.rsqrt(s.pow(2).mean(dim=1, keepdim=True) + RMS_EPS)  # [B, H, Tq, Tk]
    w = (a * keep).unsqueeze(3)  # [B, H, Tq, 1, Tk]
    values = v.permute(0, 2, 3, 1).unsqueeze(2)  # [B, H, 1, Dv, Tk]
    hidden = torch.relu((w * values).sum(1, keepdim=True))  # [B, 1, Tq, Dv, Tk]: sum over heads
    return (w * hidden).sum(-1).transpose(1, 2)  # [B, Tq, H, Dv]: sum over keys


def make_inputs(args, device):
    """float64 inputs on `device`, drawn on the CPU from --seed (the same numbers on every device)."""
    g = torch.Generator().manual_seed(args.seed)
    b, t, h = args.batch, args.seq, args.heads
    shapes = {"q": (b, t, h, args.dk), "k": (b, t, h, args.dk), "v": (b, t, h, args.dv), "bias": (h, t, t)}
    tensors = {name: torch.randn(shape, generator=g, dtype=torch.float64) for name, shape in shapes.items()}
    if not args.bias:
        tensors["bias"].zero_()
    keep = 1.0 - args.dropout
    tensors["keep"] = torch.bernoulli(torch.full((t, t), keep, dtype=torch.float64), generator=g) / keep
    tensors["upstream"] = torch.randn((b, t, h, args.dv), generator=g, dtype=torch.float64)
    return {name: tensor.to(device) for name, tensor in tensors.items()}


def output_and_grads(fn, inputs, dtype):
    """fn's output and the gradients of q, k, v, bias (float64 copies) at `dtype`."""
    leaves = {name: inputs[name].to(dtype).clone().requires_grad_(True) for name in ("q", "k", "v", "bias")}
    out = fn(leaves["q"], leaves["k"], leaves["v"], leaves["bias"], inputs["keep"].to(dtype))
    out.backward(inputs["upstream"].to(dtype))
    return {"out": out.detach().double(), **{f"grad_{n}": t.grad.double() for n, t in leaves.items()}}


def errors(result, reference):
    """Per tensor: the largest absolute error relative to the largest reference entry."""
    return {
        name: float((result[name] - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        for name, ref in reference.items()
    }


def apply_setting(setting: str):
    """(backend, inductor config patch) of a setting; raises KeyError for an option this torch lacks."""
    if setting == "baseline":
        return "inductor", {}
    name, value = setting.split("=", 1)
    if name == "backend":
        return value, {}
    import torch._inductor.config as config

    owner, *path = name.split(".")
    node = config
    for part in [owner, *path][:-1]:
        node = getattr(node, part)
    if not hasattr(node, name.split(".")[-1]):
        raise KeyError(name)
    return "inductor", {name: json.loads(value.lower()) if value.lower() in ("true", "false") else _number(value)}


def _number(text: str):
    try:
        return int(text)
    except ValueError:
        return text


def run_setting(setting, inputs, eager):
    try:
        backend, patch = apply_setting(setting)
    except (KeyError, AttributeError):
        return {"setting": setting, "status": "absent"}
    import torch._dynamo
    import torch._inductor.config as config

    row = {"setting": setting}
    tick = time.perf_counter()
    try:
        for dtype in (torch.float32, torch.float64):
            torch._dynamo.reset()
            with config.patch(patch):
                compiled = torch.compile(hyla_attention, backend=backend, fullgraph=True)
                result = output_and_grads(compiled, inputs, dtype)
            row[str(dtype).removeprefix("torch.")] = errors(result, eager["float64"])
    except Exception as e:  # noqa: BLE001 - a setting that does not compile is reported, the sweep goes on
        return {**row, "status": "ERROR", "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    row["seconds"] = round(time.perf_counter() - tick, 1)
    float32_ok = all(
        row["float32"][name] <= FLOAT32_FACTOR * eager["errors_float32"][name] + FLOAT32_FLOOR
        for name in row["float32"]
    )
    float64_ok = all(error <= FLOAT64_TOLERANCE for error in row["float64"].values())
    row["status"] = "PASS" if float32_ok and float64_ok else "FAIL"
    return row


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="auto (cuda if available) | cpu | cuda")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq", type=int, default=36, help="queries = keys")
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--dk", type=int, default=4)
    parser.add_argument("--dv", type=int, default=4)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--no-bias", dest="bias", action="store_false", help="a zero bias")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--settings", nargs="+", default=DEFAULT_SETTINGS)
    parser.add_argument("--out", help="also write the JSON here")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device(
        "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device.replace("auto", "cpu")
    )
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 products in full float32, as the reference
    inputs = make_inputs(args, device)
    eager = {"float64": output_and_grads(hyla_attention, inputs, torch.float64)}
    eager["errors_float32"] = errors(output_and_grads(hyla_attention, inputs, torch.float32), eager["float64"])
    rows = []
    for setting in args.settings:
        rows.append(run_setting(setting, inputs, eager))
        text = json.dumps(report(args, device, eager, rows), indent=1)
        if args.out:  # after every setting: a run cut off keeps what it measured
            with open(args.out, "w") as f:
                f.write(text + "\n")
    print(text)
    return 0


def report(args, device, eager, rows) -> dict:
    return {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "torch": torch.__version__,
        "shape": {k: getattr(args, k) for k in ("batch", "seq", "heads", "dk", "dv", "dropout", "bias", "seed")},
        "eager_float32_errors": eager["errors_float32"],
        "rule": f"float32: error <= {FLOAT32_FACTOR:g} x eager float32's + {FLOAT32_FLOOR:g}; "
        f"float64: error <= {FLOAT64_TOLERANCE:g} (relative to the largest float64 eager entry)",
        "settings": rows,
        "failing": [row["setting"] for row in rows if row["status"] == "FAIL"],
        "passing": [row["setting"] for row in rows if row["status"] == "PASS"],
    }


if __name__ == "__main__":
    sys.exit(main())
