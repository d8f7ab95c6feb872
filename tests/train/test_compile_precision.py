"""The compile mode (auto, and the fallback chain reduce-overhead -> default -> eager) and the precision
setting (fp32 / tf32 / bf16): what each chooses, what a run records, and that a bf16 run trains along
the float32 run's curve.

torch.compile is replaced by stand-ins here (CPU only, fast): one that records the mode it was asked
for, one whose compiled calls raise, and one that overwrites its last output on every call, as a
CUDA-graph replay does. tests/train/test_loop_cuda.py runs the real modes on a GPU."""

import json
import warnings
from dataclasses import replace

import pytest
import torch
from helpers_train import assert_same_weights, final_weights, tiny_config

from hyla.train import packed, train, train_packed
from hyla.train.configs import build_task, resolve_model
from hyla.train.distributed import DistContext
from hyla.train.numerics import process_settings, warn_if_changed
from hyla.train.step import CompiledUpdate, Trainer, build_model, compile_fallbacks, resolve_compile_mode


class RecordingCompile:
    """torch.compile that compiles nothing: the module itself, and the modes it was asked for."""

    def __init__(self):
        self.modes = []

    def __call__(self, module, mode):
        self.modes.append(mode)
        return module


def failing_compile(failing_modes):
    """torch.compile whose compiled callables raise for `failing_modes` (the others: the module)."""

    def compile_(module, mode):
        def fail(*args, **kwargs):
            raise RuntimeError(f"cannot compile in {mode}")

        return fail if mode in failing_modes else module

    return compile_


class GraphReplay:
    """A compiled call as CUDA graphs make it: each call overwrites the output of the one before."""

    def __init__(self, module):
        self.module, self.last = module, None

    def __call__(self, x):
        if self.last is not None:
            self.last.detach().fill_(float("nan"))
        self.last = self.module(x)
        return self.last


def numerics_of(run):
    env = json.loads((run / "env.json").read_text())["numerics"]
    assert torch.load(run / "checkpoints" / "latest.pt", weights_only=True)["numerics"] == env
    return env


def test_auto_is_cuda_graphs_on_cuda_and_default_elsewhere():
    assert resolve_compile_mode("auto", torch.device("cuda", 0)) == "reduce-overhead"
    assert resolve_compile_mode("auto", torch.device("cpu")) == "default"
    assert resolve_compile_mode("max-autotune", torch.device("cuda")) == "max-autotune"
    cfg = tiny_config(None, mixer="linear", step="compiled")
    assert compile_fallbacks(cfg, torch.device("cuda")) == ["reduce-overhead", "default", None]
    assert compile_fallbacks(cfg, torch.device("cpu")) == ["default", None]
    assert compile_fallbacks(replace(cfg, train=replace(cfg.train, step="eager")), torch.device("cuda")) == [None]


@pytest.mark.parametrize("mixer", ["hyla", "softmax_hyla", "hyla_identity"])
def test_hyla_family_models_train_eagerly_on_cuda_with_a_warning(mixer):
    cfg = tiny_config(None, mixer=mixer, step="compiled")
    with pytest.warns(
        RuntimeWarning, match="train.step compiled is ignored for a model with HYLA's value network on CUDA"
    ):
        assert compile_fallbacks(cfg, torch.device("cuda")) == [None]
    assert compile_fallbacks(cfg, torch.device("cpu")) == ["default", None]


def test_auto_on_cpu_is_default_exactly(tmp_path, monkeypatch):
    compile_ = RecordingCompile()
    monkeypatch.setattr(torch, "compile", compile_)
    auto = train(tiny_config(tmp_path, name="auto", steps=10, step="compiled"))
    default = train(tiny_config(tmp_path, name="default", steps=10, step="compiled", compile_mode="default"))
    assert compile_.modes == ["default", "default"]
    assert numerics_of(auto) == numerics_of(default)
    assert numerics_of(auto)["compile_mode"] == "default" and numerics_of(auto)["compile"] is True
    # a run of one resumed with the other: the same numerics, no warning
    train(tiny_config(tmp_path, name="split", steps=10, stop_at=5, step="compiled", compile_mode="default"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        train(replace(tiny_config(tmp_path, name="split", steps=10, step="compiled"), resume=True))


def test_failing_modes_fall_back_to_default_then_to_eager(tmp_path, monkeypatch):
    monkeypatch.setattr(torch, "compile", failing_compile({"reduce-overhead", "default"}))
    with pytest.warns(RuntimeWarning) as caught:
        run = train(tiny_config(tmp_path, name="graphs", steps=10, step="compiled", compile_mode="reduce-overhead"))
    messages = [str(w.message) for w in caught if "torch.compile failed" in str(w.message)]
    assert len(messages) == 2
    assert "mode reduce-overhead: RuntimeError: cannot compile in reduce-overhead" in messages[0]
    assert messages[0].endswith("continuing with mode default")
    assert "mode default" in messages[1] and messages[1].endswith("continuing with eager mode")
    eager = train(tiny_config(tmp_path, name="eager", steps=10))
    assert numerics_of(run) == numerics_of(eager)  # compile False, compile_mode None: what trained
    assert_same_weights(final_weights(run), final_weights(eager))


def test_a_failing_cuda_graph_mode_falls_back_to_default(tmp_path, monkeypatch):
    monkeypatch.setattr(torch, "compile", failing_compile({"reduce-overhead"}))
    with pytest.warns(RuntimeWarning, match="continuing with mode default"):
        run = train(tiny_config(tmp_path, steps=10, step="compiled", compile_mode="reduce-overhead"))
    assert numerics_of(run)["compile_mode"] == "default"
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"


def test_cuda_graph_outputs_are_copied_before_the_next_step(monkeypatch):
    marks = []
    monkeypatch.setattr(torch, "compile", lambda module, mode: GraphReplay(module))
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    cfg = tiny_config(None, step="compiled", compile_mode="reduce-overhead")
    task = build_task(cfg)
    cfg = replace(cfg, model=resolve_model(cfg.model, task))
    trainer = Trainer(cfg, task, DistContext(0, 1, torch.device("cpu")))
    update = CompiledUpdate(trainer, "reduce-overhead")
    [(_, pred, _)] = update([trainer], [0])
    kept = pred.clone()
    update([trainer], [1])
    assert torch.equal(pred, kept) and not pred.isnan().any()  # step 1's replay did not reach it
    assert len(marks) == 2  # every graphed step begins a new CUDA-graph generation


@pytest.mark.parametrize("precision, matmul", [("fp32", "highest"), ("tf32", "high"), ("bf16", "highest")])
def test_precision_sets_the_matmul_precision_for_the_run_and_restores_it(precision, matmul):
    cfg = tiny_config(None, precision=precision)
    torch.set_float32_matmul_precision("medium")
    try:
        with process_settings(cfg, DistContext(0, 1, torch.device("cpu"))):
            assert torch.get_float32_matmul_precision() == matmul
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision("highest")


def bf16_probe(monkeypatch) -> list[torch.dtype]:
    """The dtypes of the models' outputs in every training forward (hooked into build_model)."""
    dtypes = []

    def hooked(cfg):
        model = build_model(cfg)
        model.register_forward_hook(lambda module, args, out: dtypes.append(out.dtype) if module.training else None)
        return model

    monkeypatch.setattr("hyla.train.step.build_model", hooked)
    return dtypes


def train_losses(run) -> list[float]:
    return [
        r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["split"] == "train"
    ]


# bfloat16 against float32, the same batches and dropout masks (measured on a 2-core CPU, 6 seeds): a
# logged loss of this run moves by at most 1.6% (seed 3, the one tested), 11% for the most sensitive
# seed. A bf16 run with 30% less or 50% more learning rate, or with 10% noise on one weight matrix,
# falls outside.
BF16_TOLERANCE = 0.1


def test_bf16_trains_in_bfloat16_with_float32_weights(tmp_path, monkeypatch):
    """Trains in bfloat16 with float32 weights and optimizer state, along the float32 run's curve."""
    dtypes = bf16_probe(monkeypatch)
    run = train(tiny_config(tmp_path, name="bf16", steps=40, optim={"lr": 3e-3}, precision="bf16", log={"every": 10}))
    assert len(dtypes) == 40 and set(dtypes) == {torch.bfloat16}
    fp32 = train(tiny_config(tmp_path, name="fp32", steps=40, optim={"lr": 3e-3}, log={"every": 10}))
    losses, reference = train_losses(run), train_losses(fp32)
    assert len(losses) == len(reference) == 4 and reference[-1] < 0.5 * reference[0]  # float32 learns: 0.21 -> 0.057
    for step, (got, want) in enumerate(zip(losses, reference), start=1):
        assert abs(got - want) <= BF16_TOLERANCE * want, f"step {10 * step}: loss {got} in bfloat16, {want} in float32"
    assert losses != reference  # (bfloat16 did round)
    state = torch.load(run / "checkpoints" / "latest.pt", weights_only=True)
    assert {t.dtype for t in state["model"].values() if t.is_floating_point()} == {torch.float32}
    assert {t.dtype for s in state["optimizer"]["state"].values() for k, t in s.items() if k != "step"} == {
        torch.float32
    }
    assert numerics_of(run)["precision"] == "bf16"
    assert torch.get_float32_matmul_precision() == "highest"


def test_a_bf16_pack_computes_under_bfloat16_autocast(tmp_path, monkeypatch):
    """(Under vmap a linear layer adds its float32 bias after the bfloat16 product, so a pack's
    activations between layers are float32; its products are bfloat16, as the attention outputs show.)"""
    dtypes, vmappable_copy = [], packed.vmappable_copy

    def hooked(model):
        skeleton = vmappable_copy(model)
        skeleton.blocks[0].attention.out.register_forward_hook(lambda module, args, out: dtypes.append(args[0].dtype))
        return skeleton

    monkeypatch.setattr(packed, "vmappable_copy", hooked)
    runs = train_packed(
        [replace(tiny_config(tmp_path, name=f"m{seed}", steps=10, precision="bf16"), seed=seed) for seed in (0, 1)]
    )
    assert len(dtypes) == 10 and set(dtypes) == {torch.bfloat16}
    for run in runs:
        assert json.loads((run / "summary.json").read_text())["status"] == "completed"
        assert numerics_of(run)["precision"] == "bf16"


def test_resume_of_a_run_from_before_the_precision_setting(tmp_path):
    saved = {"threads": 1, "device": "cpu", "compile": False, "compile_mode": None}  # no "precision": fp32
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warn_if_changed(saved, {**saved, "precision": "fp32"}, tmp_path)
    with pytest.warns(RuntimeWarning, match="precision bf16 \\(was fp32\\)"):
        warn_if_changed(saved, {**saved, "precision": "bf16"}, tmp_path)


def test_an_unknown_precision_is_refused_with_the_choices():
    from hyla.cli.train_args import parse_train_args
    from hyla.train.configs import ConfigError

    with pytest.raises(ConfigError, match="train.precision.*fp32.*tf32.*bf16"):
        parse_train_args(["--train.precision", "fp16"])
