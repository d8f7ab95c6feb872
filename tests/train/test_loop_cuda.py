"""Training on a CUDA device: eager, compiled and CUDA-graph runs, at every precision, follow the
eager float32 run on the CPU and record the compile mode that trained (auto: CUDA graphs; HYLA's
value network: eager, train.step compiled or not); with attention dropout (the GPU draws other masks),
eager and CUDA-graph runs reach the CPU run's loss; a resumed run (deterministic mode) reaches
exactly the weights of an uninterrupted one.

Batches and initial weights are bit for bit the same on every device and torch version
(counter-based random numbers, initialization on the CPU), so without attention dropout a float32
run on the GPU differs from the CPU run by rounding alone. Measured on a 2-core CPU (seed 3, 60
steps, a loss logged every 5 steps): other summation orders and attention implementations (2
threads; the PyTorch path instead of the C++ kernel; compiled instead of eager) move a logged loss
by at most 6e-7 relative; bfloat16 moves the mean loss of steps 31-60 by 1e-3 (by 0.2 for the most
sensitive of 8 seeds), and other dropout masks (8 mask streams, or a compiled graph's own) by at
most 3.8%. The tolerances leave wide margins for the GPU's rounding. A 1% change of the learning
rate fails the float32 comparison, half the learning rate the late-loss ones; the late loss is about
the targets' variance (0.045) whatever the details, so those catch a run that does not learn rather
than a subtly wrong one (the math is checked against the reference path in
tests/train/test_reference_path_curve.py and the kernels in tests/ops)."""

import json
import warnings
from dataclasses import replace

import pytest
import torch
from helpers_train import assert_same_weights, final_weights, tiny_config

from hyla.train.configs import build_task, resolve_model
from hyla.train.loop import train
from hyla.train.presets import PRESETS
from hyla.train.step import build_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

RUN = dict(steps=60, optim={"lr": 3e-3})  # a training record every 5 steps: 12 logged losses
FLOAT32_TOLERANCE = 1e-3  # relative, each logged loss of a float32 run
LOW_PRECISION_TOLERANCE = 0.1  # relative, the mean loss of steps 31-60 of a TF32 or bfloat16 run
DROPOUT_MASK_TOLERANCE = 0.15  # relative, the mean loss of steps 31-60 with other dropout masks


def config(tmp_path, name: str, mixer: str = "hyla", dropout: float = 0.0, **train_settings):
    cfg = tiny_config(tmp_path, name=name, mixer=mixer, **RUN, **train_settings)
    return replace(cfg, model=replace(cfg.model, attention_dropout=dropout))


def train_losses(run) -> list[float]:
    records = map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
    return [r["loss"] for r in records if r["split"] == "train"]


def late_mean(losses: list[float]) -> float:
    """The mean training loss of the second half of the run (steps 31-60)."""
    return sum(losses[6:]) / 6


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory) -> dict[tuple[str, float], list[float]]:
    """The eager float32 runs on the CPU, the reference: {(mixer, attention dropout): losses}."""
    root = tmp_path_factory.mktemp("cpu")
    runs = {
        (mixer, dropout): train_losses(train(config(root, f"{mixer}-dropout{dropout}", mixer, dropout)))
        for mixer in ("hyla", "linear")
        for dropout in (0.0, 0.1)
    }
    # the reference learns: from above 0.06 to about the targets' variance (0.045)
    for losses in runs.values():
        assert len(losses) == 12 and late_mean(losses) < 0.06 < losses[0]
    return runs


@pytest.mark.parametrize(
    "mixer, compile, compile_mode, precision, trained_mode",
    [
        ("hyla", False, "auto", "fp32", None),
        ("hyla", True, "auto", "fp32", None),  # eager, with a warning (hyla.train.step.COMPILED_HYLA_ON_CUDA)
        ("linear", False, "auto", "fp32", None),
        ("linear", True, "default", "fp32", "default"),
        ("linear", True, "reduce-overhead", "fp32", "reduce-overhead"),
        ("linear", True, "auto", "fp32", "reduce-overhead"),
        ("linear", True, "auto", "tf32", "reduce-overhead"),
        ("linear", True, "auto", "bf16", "reduce-overhead"),
        ("hyla", False, "auto", "bf16", None),
    ],
    ids=[
        "hyla-eager",
        "hyla-compile-ignored",
        "eager",
        "compiled",
        "cuda-graphs",
        "auto",
        "auto-tf32",
        "auto-bf16",
        "hyla-eager-bf16",
    ],
)
def test_cuda_training_follows_the_cpu_float32_curve(
    tmp_path, cpu_runs, mixer, compile, compile_mode, precision, trained_mode
):
    warnings.filterwarnings("error", message="torch.compile failed")  # no silent fallback
    step = "compiled" if compile else "eager"
    settings = dict(device="cuda", step=step, compile_mode=compile_mode, precision=precision)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        run = train(config(tmp_path, "cuda", mixer, **settings))
    assert any("train.step compiled is ignored" in str(w.message) for w in caught) == (mixer == "hyla" and compile)
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    env = json.loads((run / "env.json").read_text())
    assert env["numerics"]["device"].startswith("cuda")
    assert (env["numerics"]["compile_mode"], env["numerics"]["precision"]) == (trained_mode, precision)
    losses, reference = train_losses(run), cpu_runs[mixer, 0.0]
    assert len(losses) == len(reference)
    if precision == "fp32":
        for step, (got, want) in enumerate(zip(losses, reference), start=1):
            assert abs(got - want) <= FLOAT32_TOLERANCE * want, (
                f"step {5 * step}: loss {got} on CUDA, {want} on the CPU"
            )
    else:
        got, want = late_mean(losses), late_mean(reference)
        assert abs(got - want) <= LOW_PRECISION_TOLERANCE * want, f"steps 31-60: loss {got} in {precision}, {want}"


@pytest.mark.parametrize(
    "mixer, compile", [("hyla", False), ("linear", True)], ids=["hyla-eager", "linear-cuda-graphs"]
)
def test_cuda_training_with_attention_dropout_reaches_the_cpu_loss(tmp_path, cpu_runs, mixer, compile):
    """The GPU draws other dropout masks than the CPU (and a compiled graph other masks than eager
    code): the losses agree to the spread of the masks, not to rounding."""
    warnings.filterwarnings("error", message="torch.compile failed")
    run = train(config(tmp_path, "cuda", mixer, dropout=0.1, device="cuda", step="compiled" if compile else "eager"))
    got, want = late_mean(train_losses(run)), late_mean(cpu_runs[mixer, 0.1])
    assert abs(got - want) <= DROPOUT_MASK_TOLERANCE * want, f"steps 31-60: loss {got} on CUDA, {want} on the CPU"


def test_cuda_resume_reaches_exactly_the_uninterrupted_weights(tmp_path):
    settings = dict(steps=20, device="cuda", deterministic=True)
    full = train(tiny_config(tmp_path, name="full", **settings))
    train(tiny_config(tmp_path, name="split", stop_at=10, **settings))
    resumed = train(replace(tiny_config(tmp_path, name="split", **settings), resume=True))
    assert_same_weights(final_weights(full), final_weights(resumed))


def test_compiled_sraven_hyla_model_matches_eager_on_cuda():
    """The paper's SRAVEN HYLA model (raven_3x3_4features; attention dropout off: eval mode), one
    batch on CUDA: the compiled model's loss and gradients equal the eager model's to float32
    rounding. `auto` keeps HYLA's value network out of the graph on CUDA (naive_eager): compiled in
    the pointwise form (since removed), this test failed on an H200 (gradients off by up to 0.23
    where the largest is 0.22), and runs of this preset did not learn on an H100
    (experiments/RESULTS.md)."""
    cfg = PRESETS["raven_3x3_4features"]()
    task = build_task(cfg, "cuda")
    cfg = replace(cfg, model=resolve_model(replace(cfg.model, mixer="hyla"), task))
    model = build_model(cfg).cuda().eval()
    batch = task.batch("train", 64, 0, 0, 1).to("cuda")

    def loss_and_grads(forward):
        model.zero_grad()
        loss = task.loss(forward(batch.x), batch)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    want_loss, want_grads = loss_and_grads(model)
    torch._dynamo.reset()
    got_loss, got_grads = loss_and_grads(torch.compile(model))
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=0)
    for got, want in zip(got_grads, want_grads):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3 * want.abs().max().item())
