"""In-context fuzzy logic regression (docs/tasks.md).

A task is a set of K distinct terms over L variables; its function is the Zadeh DNF
`f(x) = max_k min_i literal_{k,i}(x)`. A sequence shows `seq_len` pairs (x, f(x)) with
x ~ U[0,1]^L; the y of the last pair is hidden and is the target.

Term index t <-> the L binary digits of t, variable 0 most significant; digit 1 means the
literal x_i, digit 0 means 1 - x_i. The last `frac_unseen_terms` of the 2^L terms (in index
order) never appear in training. K-combinations of the remaining ("seen") terms are shuffled
with the seed and the first `frac_held_out` of them form `ood`; the rest are the training tasks
(`train`, and `valid` = fresh samples of them). `novel_terms` = K-combinations of unseen terms.

Analysis variants of every split: `<split>_fixed_context` (one set of context inputs shared by
all sequences of the batch; the query input varies) and `<split>_fixed_query` (one query input
shared by all sequences; the context varies). `fixed_inputs` says where the shared inputs come
from: "per_batch" (default) draws them with each batch, so they differ between splits and steps;
"per_seed" draws them once from the seed, so every split and step shares them, as in the authors'
code (their probe of held-out tasks then sees the same query point as the one it was fit on).
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

from .base import Batch, RowwiseTask, held_out_count, stable_seed
from .random import RandomStream, integers, permutations, uniform

_TASK_SPLITS = ("train", "valid", "ood", "novel_terms")
_INPUT_VARIANTS = ("", "_fixed_context", "_fixed_query")
FIXED_INPUTS = ("per_batch", "per_seed")


def _lexicographic_rank(combination: list[int], num_items: int) -> int:
    """Index of a sorted combination among all combinations of its size from `num_items`
    items, in lexicographic order (itertools.combinations order)."""
    size, rank, previous = len(combination), 0, -1
    for position, item in enumerate(combination):
        for skipped in range(previous + 1, item):
            rank += math.comb(num_items - 1 - skipped, size - 1 - position)
        previous = item
    return rank


class FuzzyLogic(RowwiseTask):
    """In-context fuzzy logic regression.

    Batches are generated on `device` (the same bits on every device, see `hyla.tasks.base`).
    `batch(split, B, step)` returns
      x `[B, seq_len, L+1]` float: tokens concat(x, f(x)), the last token's f(x) set to 0;
      y `[B, 1]` float: f(x) of the last token;
      info: `terms [B, K, L]` long in {0, 1}; `term_indices [B, K]` sorted term indices;
            `task_index [B]` index of the task among all C(2^L, K) term combinations in
            lexicographic order (the same task has the same index in every split);
            `targets [B, seq_len]` f(x) of every token (used by the R² metric).
    """

    name = "fuzzy_logic"
    metric_name = "r2"
    output_dim = 1
    num_outputs = 1

    def __init__(
        self,
        num_variables: int = 4,
        num_terms: int = 2,
        seq_len: int = 16,
        frac_held_out: float = 0.5,
        frac_unseen_terms: float = 0.25,
        seed: int = 0,
        device: torch.device | str = "cpu",
        fixed_inputs: str = "per_batch",
    ):
        if fixed_inputs not in FIXED_INPUTS:
            raise ValueError(f"fixed_inputs must be one of {', '.join(FIXED_INPUTS)}, got {fixed_inputs!r}")
        if num_variables < 1 or num_terms < 1:
            raise ValueError("num_variables and num_terms must be positive")
        if seq_len < 2:
            raise ValueError("seq_len must be at least 2 (context plus query)")
        self.num_variables, self.num_terms, self.seq_len = num_variables, num_terms, seq_len
        self.frac_held_out, self.frac_unseen_terms = frac_held_out, frac_unseen_terms
        self.seed, self.device, self.fixed_inputs = seed, torch.device(device), fixed_inputs
        self.input_dim = num_variables + 1
        self.splits = tuple(s + v for s in _TASK_SPLITS for v in _INPUT_VARIANTS)

        num_all = 2**num_variables
        num_seen = num_all - held_out_count(num_all, frac_unseen_terms)
        seen = torch.tensor(list(itertools.combinations(range(num_seen), num_terms)), dtype=torch.long).reshape(
            -1, num_terms
        )
        novel = torch.tensor(
            list(itertools.combinations(range(num_seen, num_all), num_terms)), dtype=torch.long
        ).reshape(-1, num_terms)
        order = permutations(RandomStream(stable_seed(seed, self.name, "tasks")).bits((len(seen),)))
        shuffled = seen[order]
        num_ood = held_out_count(len(seen), frac_held_out)
        train, ood = _sorted_rows(shuffled[num_ood:]), _sorted_rows(shuffled[:num_ood])
        split_tasks = {"train": train, "valid": train, "ood": ood, "novel_terms": novel}
        self._task_index = {
            split: torch.tensor(
                [_lexicographic_rank(row, num_all) for row in tasks.tolist()], dtype=torch.long, device=self.device
            )
            for split, tasks in split_tasks.items()
        }
        self._split_tasks = {split: tasks.to(self.device) for split, tasks in split_tasks.items()}
        # digits[t, i] = digit of variable i in term t (variable 0 most significant)
        shifts = torch.arange(num_variables - 1, -1, -1)
        self._digits = ((torch.arange(num_all)[:, None] >> shifts) & 1).to(self.device)  # [2^L, L]
        self.eval_splits = tuple(s for s in ("valid", "ood", "novel_terms") if len(self._split_tasks[s]))

    def split_tasks(self, split: str) -> torch.Tensor:
        """The tasks of `split` as sorted term indices, rows in lexicographic order: `[N, K]`
        long on the task's device (N = 0 for an empty split)."""
        self.check_split(split)
        return self._split_tasks[_parse(split)[0]].clone()

    def _generate_rows(self, split: str, stream: RandomStream, batch_size: int, rows: tuple[int, int]) -> Batch:
        task_split, variant = _parse(split)
        tasks = self._split_tasks[task_split]
        if len(tasks) == 0:
            raise ValueError(
                f"split {split!r} has no tasks (num_variables={self.num_variables}, "
                f"num_terms={self.num_terms}, frac_held_out={self.frac_held_out}, "
                f"frac_unseen_terms={self.frac_unseen_terms})"
            )
        T, L = self.seq_len, self.num_variables
        per_sample = stream.bits((batch_size, 1 + L * T), rows)  # one draw: the task, the inputs
        B = len(per_sample)  # this rank's rows
        choice = integers(per_sample[:, 0], len(tasks))
        term_indices = tasks[choice]  # [B, K]
        terms = self._digits[term_indices]  # [B, K, L]
        own_inputs = uniform(per_sample[:, 1:]).view(B, L, T)
        inputs = self._inputs(variant, own_inputs, stream).transpose(0, 1).contiguous()  # [L, B, T]

        # With x in [0, 1] and digit d in {0, 1} the literal is 1 - |x - d|, so
        # f = max_k min_i (1 - |x_i - d_ki|) = 1 - min_k max_i |x_i - d_ki|. Variables lead the
        # layout so that both reductions run over outer dimensions, whose elementwise max / min
        # vectorize across the batch (benchmarks/README.md, `bench_tasks.py`).
        digits = terms.permute(1, 2, 0)[..., None].float()  # [K, L, B, 1]
        targets = 1.0 - (inputs - digits).abs_().amax(dim=1).amin(dim=0)  # [B, T]
        x = torch.empty(B, T, L + 1, device=self.device)
        x[..., :L] = inputs.permute(1, 2, 0)
        x[..., L] = targets
        x[:, -1, L] = 0.0
        info = {
            "terms": terms,
            "term_indices": term_indices,
            "task_index": self._task_index[task_split][choice],
            "targets": targets,
        }
        return Batch(x, targets[:, -1:].clone(), info)

    def _inputs(self, variant: str, own: torch.Tensor, stream: RandomStream) -> torch.Tensor:
        """Inputs `[B, L, seq_len]` (context tokens, then the query token) from each sample's
        own inputs `own [B, L, seq_len]` and, for the fixed variants, inputs shared by the batch."""
        if variant == "":
            return own
        shared_stream = (
            stream
            if self.fixed_inputs == "per_batch"
            else RandomStream(stable_seed(self.seed, self.name, "fixed"), self.device)
        )
        shared = uniform(shared_stream.bits((1, self.num_variables, self.seq_len)))  # [1, L, T]
        shared = shared.expand(len(own), -1, -1)  # the same for every row
        if variant == "_fixed_context":
            return torch.cat([shared[..., :-1], own[..., -1:]], dim=2)
        return torch.cat([own[..., :-1], shared[..., -1:]], dim=2)  # "_fixed_query"

    def loss(self, pred: torch.Tensor, batch: Batch) -> torch.Tensor:
        """MSE of the prediction `[B, 1, 1]` at the query; computed in float32."""
        return F.mse_loss(pred.reshape(batch.y.shape).float(), batch.y)

    def metrics(self, pred: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-sequence `r2 = 1 - (ŷ - y)² / var(targets of the sequence)` and `mse`, each `[B]`.

        The variance is over all seq_len targets (the query's included), so predicting the
        sequence's mean target scores 0 on average and the truth scores 1.
        """
        squared_error = (pred.detach().reshape(batch.y.shape).float() - batch.y).square()[:, 0]
        variance = batch.info["targets"].var(dim=1, correction=0)
        # a sequence whose targets are all equal has no variance to explain; the guard only
        # keeps that (measure-zero) case finite
        return {"r2": 1.0 - squared_error / variance.clamp_min(1e-12), "mse": squared_error}


def _parse(split: str) -> tuple[str, str]:
    """A (checked) split name as (task split, input variant): 'valid_fixed_query' ->
    ('valid', '_fixed_query')."""
    for variant in _INPUT_VARIANTS[1:]:
        if split.endswith(variant):
            return split[: -len(variant)], variant
    return split, ""


def _sorted_rows(rows: torch.Tensor) -> torch.Tensor:
    """Rows in lexicographic order (each row is already sorted)."""
    return torch.tensor(sorted(rows.tolist()), dtype=torch.long).reshape(-1, rows.shape[1])
