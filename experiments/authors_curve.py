"""The authors' JAX code as an oracle of training dynamics: their model, data and optimizer, trained
for `--stop` steps of a `--steps`-step schedule, with the mean training loss of every `--window`
steps and their evaluation at `--eval-at` steps written as JSON lines.

    python experiments/authors_curve.py --authors A --config 'configs/raven.py:raven_3x3_4features;linear_hypatt' \\
        --steps 40000 --stop 8000 --out runs/authors/raven_hyla_s0.jsonl

Run it with a Python that has jax, flax, optax, chex, ml_collections and absl (not hyla's), on a
checkout of github.com/smonsays/hypernetwork-attention (A). Their modules are imported, not
modified; tensorflow and wandb, which their run script imports but this path does not use, are
replaced by empty modules. The schedule is theirs for `--steps` steps (the data config's
`num_train` is set to steps × batch), so a curve is comparable with a hyla run of the same
budget, step for step (not draw for draw: the random streams differ).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import types


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--authors", required=True, help="checkout of the authors' repository")
    parser.add_argument("--config", required=True, help="their config argument, 'configs/FILE.py:DATA;MODEL'")
    parser.add_argument("--steps", type=int, required=True, help="the schedule's length in steps")
    parser.add_argument("--stop", type=int, help="stop after this many steps (default: --steps)")
    parser.add_argument("--window", type=int, default=100, help="steps per training-loss record")
    parser.add_argument("--eval-at", type=int, nargs="*", default=[], help="steps after which to evaluate")
    parser.add_argument("--eval-samples", type=int, default=2048, help="tasks per evaluation split")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="JSON lines, one record per window and evaluation")
    return parser.parse_args(argv)


def import_authors(path: str):
    """Their run module (imported from inside their checkout, where their config paths point), with
    the modules this path does not use stubbed out."""
    path = os.path.abspath(path)
    os.chdir(path)
    sys.path.insert(0, path)
    for name in ("wandb", "tensorflow", "hyla.data.wiki"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["hyla.data.wiki"].create_wikitext_datasets = None
    sys.argv = ["run.py"]
    import hyla

    if not hyla.__file__.startswith(path):
        sys.exit(f"imported {hyla.__file__}, not the authors' package under {path}")
    import run

    return run


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out_path = os.path.abspath(args.out)
    run = import_authors(args.authors)
    import jax
    from absl import flags

    flags.FLAGS(["run.py", "--config=" + args.config])
    config = flags.FLAGS.config
    config.seed = args.seed
    config.data.num_train = args.steps * config.batch_size
    config.data.num_test = config.data.num_ood = args.eval_samples
    exp = run.setup(config, logger=[], callbacks=[])
    state = exp.reset(jax.random.PRNGKey(config.seed))
    stop = args.stop or args.steps
    losses, start = [], time.perf_counter()
    with open(out_path, "w") as out:

        def write(record: dict) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()

        write({"config": args.config, "seed": args.seed, "steps": args.steps, "jax": jax.__version__})
        for step, batch in enumerate(exp.train_loader, start=1):
            state, metrics = exp.train_step(state, batch)
            losses.append(metrics["loss"])
            if step % args.window == 0:
                mean = float(sum(float(x) for x in losses) / len(losses))
                write({"step": step, "train_loss": mean, "elapsed_s": round(time.perf_counter() - start, 1)})
                losses = []
            if step in args.eval_at or step == stop:
                for split, loader in exp.eval_loaders.items():
                    if split in ("test", "ood"):
                        values = {k: float(v) for k, v in exp.eval(state, loader).items()}
                        write({"step": step, "split": split, **values})
            if step == stop:
                break
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
