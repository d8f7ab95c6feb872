"""Training steps/s of a mixture-of-experts model in its routed form (each expert on its tokens) or
its dense form (every expert on every token): the fuzzy-logic Table A1 MoE rows (5 experts, top 2).

    for i in 1 2; do
        python benchmarks/bench_moe.py --form dense >> moe.jsonl
        python benchmarks/bench_moe.py --form routed >> moe.jsonl
    done

Each process prints one JSON line: the steady rate over `--steps` steps after `--warmup` steps
(compilation included there), with the setting and the machine. Alternate the forms, as above, so
that a drift of the machine's speed falls on both; benchmarks/results/moe.json holds such pairs.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import torch

from hyla.nn.feedforward import MixtureOfExperts
from hyla.train.configs import build_task, resolve_model
from hyla.train.distributed import DistContext
from hyla.train.numerics import process_settings
from hyla.train.presets import get_preset
from hyla.train.run_dir import cpu_name, git_commit
from hyla.train.step import Trainer, choose_update


def steps_per_second(args: argparse.Namespace) -> float:
    cfg = get_preset("logic_4var_2term")
    cfg = replace(
        cfg,
        fuzzy_logic=replace(cfg.fuzzy_logic, seq_len=32, frac_held_out=0.7),
        model=replace(cfg.model, mixer=args.mixer, num_experts=5, experts_top_k=2),
        train=replace(cfg.train, step="compiled" if args.compile else "eager", threads=args.threads),
    )
    ctx = DistContext(0, 1, torch.device("cpu"))
    with process_settings(cfg, ctx):
        task = build_task(cfg, ctx.device)
        cfg = replace(cfg, model=resolve_model(cfg.model, task))
        trainer = Trainer(cfg, task, ctx)
        for module in trainer.model.modules():
            if isinstance(module, MixtureOfExperts):
                module.routed = args.form == "routed"
        update = choose_update([trainer], [0])
        for step in range(args.warmup + args.steps):
            if step == args.warmup:
                start = time.perf_counter()
            [(loss, _, _)] = update([trainer], [step])  # the training loop's step (hyla.train.loop.run_steps)
            trainer.scheduler.step()
        loss.item()
        return args.steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--form", choices=["routed", "dense"], required=True)
    parser.add_argument("--mixer", default="softmax")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    rate = steps_per_second(args)
    machine = {"cpu": cpu_name(), "torch": torch.__version__, "git_commit": git_commit()}
    print(json.dumps({**vars(args), "steps_per_second": rate, "machine": machine}))


if __name__ == "__main__":
    main()
