"""SRAVEN: symbolic Raven progressive matrices (docs/tasks.md).

A 3×3 grid of panels, each panel a vector of K feature values in {0..F-1}. Every feature
follows one rule along each row (all arithmetic mod F); the rules, in the paper's order A-H:

    0 constant          (c, c, c)            c drawn per row
    1 progression +1    (s, s+1, s+2)        s drawn per row
    2 progression +2    (s, s+2, s+4)
    3 progression -1    (s, s-1, s-2)
    4 progression -2    (s, s-2, s-4)
    5 addition          (a, b, a+b)          a, b drawn per row
    6 subtraction       (a, b, a-b)
    7 distribute-three  3 distinct values drawn once per task; each row an independent random
                        ordering of them

A task's rule assignment is a multiset of K rules (330 for K=4); `frac_ood` of the multisets,
chosen with the seed, are held out for `ood`. A sample draws a multiset of its split and a
random assignment of that multiset to the K features (`rule_order="random"`); with
`rule_order="sorted"` feature j gets the j-th smallest rule of the multiset, as in the authors'
code. On permuted splits the two give the same distribution of grids (the column permutations
hide the order); on `*_unpermuted` splits "sorted" ties the rule to the feature position (the
authors' latent analysis probes the last feature, which then always holds the largest rule).
With `permute=True` every column of the grid shows its features in its own random order (the
same in all three rows), so the model must also find which features correspond across columns:
`panels[b, r, c, j] = unpermuted[b, r, c, perm[b, c, j]]`. The `*_unpermuted` splits switch that
off.

Only the paper's 3×3 grid is supported: addition, subtraction and distribute-three are defined
for rows of three, and the ambiguity checker relies on it. F must be at least 5 so that the four
progressions are different rules (for F = 4, +2 and -2 coincide).
"""

from __future__ import annotations

import itertools
import math

import torch

from .ambiguity import is_ambiguous
from .base import Batch, RowwiseTask, held_out_count, stable_seed
from .random import RandomStream, integers, permutations

NUM_RULES = 8
DISTRIBUTE_THREE = 7
_SPLITS = ("train", "valid", "ood", "train_unpermuted", "valid_unpermuted", "ood_unpermuted")
RULE_ORDERS = ("random", "sorted")

# Rules 0-6 are affine in two values (u, v) drawn per row and feature: a row is
# (u, a1*u + b1*v + c1, a2*u + b2*v + c2) mod F. One row of (a1, b1, c1, a2, b2, c2) per rule.
_AFFINE_RULES = torch.tensor(
    [
        [1, 0, 0, 1, 0, 0],  # constant
        [1, 0, 1, 1, 0, 2],  # progression +1
        [1, 0, 2, 1, 0, 4],  # progression +2
        [1, 0, -1, 1, 0, -2],  # progression -1
        [1, 0, -2, 1, 0, -4],  # progression -2
        [0, 1, 0, 1, 1, 0],  # addition
        [0, 1, 0, 1, -1, 0],  # subtraction
    ]
)


def _rule_rows(num_values: int) -> torch.Tensor:
    """Every row each rule can produce, `[NUM_RULES, M, 3]`, indexed by a row code:
    u*F + v for the affine rules 0-6 and subset*6 + ordering for distribute-three (the 3-subset
    of values in lexicographic order, then one of its 6 orderings). Unused codes hold zeros.

    Looking rows up in one table makes sampling a grid a handful of tensor operations."""
    F = num_values
    u, v = torch.arange(F).repeat_interleave(F), torch.arange(F).repeat(F)  # code = u*F + v
    a1, b1, c1, a2, b2, c2 = _AFFINE_RULES.T[:, :, None]
    affine = torch.stack(
        [u.expand(len(_AFFINE_RULES), -1), a1 * u + b1 * v + c1, a2 * u + b2 * v + c2], dim=-1
    ).remainder(F)  # [7, F*F, 3]
    subsets = torch.tensor(list(itertools.combinations(range(F), 3)))
    orderings = torch.tensor(list(itertools.permutations(range(3))))
    distributed = subsets[:, orderings].reshape(-1, 3)  # [C(F,3)*6, 3]
    rows = torch.zeros(NUM_RULES, max(F * F, len(distributed)), 3, dtype=torch.long)
    rows[:DISTRIBUTE_THREE, : F * F] = affine
    rows[DISTRIBUTE_THREE, : len(distributed)] = distributed
    return rows


class SRaven(RowwiseTask):
    """Symbolic Raven progressive matrices.

    Batches are generated on `device` (the same bits on every device, see `hyla.tasks.base`);
    `all_rule_sets` and `split_tasks` live there too.
    `batch(split, B, step)` returns
      x `[B, 9K, F]` float: the 8 context panels row-major, each as K one-hot tokens, then K
        all-zero query tokens;
      y `[B, K]` long: the values of the last panel as shown (`panels[:, 2, 2]`);
      info: `rules [B, K]` rule of each feature (unpermuted order); `panels [B, 3, 3, K]`
        values as shown; `perm [B, 3, K]` feature order of each column; `rule_set_index [B]`
        index of the rule multiset in `all_rule_sets`; with `with_ambiguity=True` also
        `ambiguous [B]` bool (see `hyla.tasks.ambiguity`).
    """

    name = "sraven"
    metric_name = "acc"

    def __init__(
        self,
        num_features: int = 4,
        num_values: int = 8,
        grid_size: int = 3,
        permute: bool = True,
        frac_ood: float = 0.25,
        seed: int = 0,
        device: torch.device | str = "cpu",
        rule_order: str = "random",
    ):
        if rule_order not in RULE_ORDERS:
            raise ValueError(f"rule_order must be one of {', '.join(RULE_ORDERS)}, got {rule_order!r}")
        if grid_size != 3:
            raise ValueError(
                f"SRaven supports only the paper's 3x3 grid (grid_size=3), got "
                f"{grid_size}: addition, subtraction and distribute-three are rules "
                "over rows of three"
            )
        if num_values < 5:
            raise ValueError(
                f"num_values must be >= 5 so that the progressions +-1, +-2 are "
                f"four different rules (and distribute-three has 3 distinct "
                f"values), got {num_values}"
            )
        if num_features < 1:
            raise ValueError("num_features must be positive")
        self.num_features, self.num_values, self.grid_size = num_features, num_values, grid_size
        self.permute, self.frac_ood, self.seed, self.rule_order = permute, frac_ood, seed, rule_order
        self.device = torch.device(device)
        self.splits = _SPLITS
        self.input_dim = self.output_dim = num_values
        self.num_outputs = num_features
        self.seq_len = grid_size * grid_size * num_features

        self.all_rule_sets = torch.tensor(
            list(itertools.combinations_with_replacement(range(NUM_RULES), num_features)), device=self.device
        )
        num_sets = len(self.all_rule_sets)
        order = permutations(RandomStream(stable_seed(seed, self.name, "tasks")).bits((num_sets,)))
        num_ood = held_out_count(num_sets, frac_ood)
        ood, train = (indices.sort().values.to(self.device) for indices in (order[:num_ood], order[num_ood:]))
        self._rule_set_indices = {"train": train, "valid": train, "ood": ood}
        self.eval_splits = ("valid", "ood") if num_ood else ("valid",)

        rows = _rule_rows(num_values)
        self._codes_per_rule = rows.shape[1]
        self._rule_rows = rows.flatten().to(self.device)  # [NUM_RULES * M * 3]: value = rule, code, column
        self._num_subsets = math.comb(num_values, 3)
        # one-hot rows of the values plus an all-zero row (index F) for the query tokens
        self._one_hot = torch.cat([torch.eye(num_values), torch.zeros(1, num_values)]).to(self.device)

    def split_tasks(self, split: str) -> torch.Tensor:
        """The rule multisets of `split` (sorted rule indices, rows in lexicographic order):
        `[N, K]` long on the task's device (N = 0 for an empty split)."""
        self.check_split(split)
        return self.all_rule_sets[self._rule_set_indices[_task_split(split)]]

    def batch(
        self, split: str, batch_size: int, step: int, rank: int = 0, world_size: int = 1, with_ambiguity: bool = False
    ) -> Batch:
        """See `Task.batch`; `with_ambiguity=True` adds `info["ambiguous"]` `[B]` bool (the check
        tries every feature correspondence, far more work than generating the batch: meant for
        evaluation)."""
        batch = super().batch(split, batch_size, step, rank, world_size)
        if with_ambiguity:
            batch.info["ambiguous"] = is_ambiguous(batch.info["panels"], self.num_values)
        return batch

    def _generate_rows(self, split: str, stream: RandomStream, batch_size: int, rows: tuple[int, int]) -> Batch:
        rule_set_indices = self._rule_set_indices[_task_split(split)]
        if len(rule_set_indices) == 0:
            raise ValueError(f"split {split!r} has no rule sets (frac_ood={self.frac_ood})")
        K, F = self.num_features, self.num_values
        device = self.device
        # one draw holds every random number of a sample (fewer tensor ops than one draw each)
        per_sample = stream.bits((batch_size, 1 + 8 * K), rows)
        B = len(per_sample)  # this rank's rows
        choice, rule_keys, row_draws, subset_draws, perm_keys = per_sample.split([1, K, 3 * K, K, 3 * K], dim=1)
        rule_set_index = rule_set_indices[integers(choice[:, 0], len(rule_set_indices))]
        rules = self.all_rule_sets[rule_set_index]  # [B, K], sorted
        if self.rule_order == "random":  # a random assignment of the multiset's rules to the features
            rules = rules.gather(1, permutations(rule_keys))

        # a row code per row and feature; distribute-three uses one 3-subset per task and feature.
        # One integer uniform on [0, 6 F^2) is an independent pair (affine code, ordering).
        is_distributed = (rules == DISTRIBUTE_THREE)[:, None, :]  # [B, 1, K]
        row_value = integers(row_draws, 6 * F * F).reshape(B, 3, K)
        affine_code, ordering = row_value % (F * F), row_value // (F * F)
        subset = integers(subset_draws, self._num_subsets)[:, None, :]  # [B, 1, K]
        code = torch.where(is_distributed, subset * 6 + ordering, affine_code)
        row_start = (rules[:, None, :] * self._codes_per_rule + code) * 3  # [B, rows, K]

        # panels[b, r, c, j] = unpermuted[b, r, c, perm[b, c, j]]: column c of row r of the row
        # that feature perm[b, c, j] follows
        shown_start = row_start[:, :, None, :].expand(B, 3, 3, K)  # [B, rows, cols, K]
        if self.permute and not split.endswith("_unpermuted"):
            perm = permutations(perm_keys.reshape(B, 3, K))  # [B, cols, K]
            shown_start = shown_start.gather(3, perm[:, None].expand(B, 3, 3, K))
        else:
            perm = torch.arange(K, device=device).expand(B, 3, K)
        value_index = shown_start + torch.arange(3, device=device)[:, None]  # + column
        panels = self._rule_rows.index_select(0, value_index.flatten()).view(B, 3, 3, K)

        tokens = panels.reshape(B, 9 * K).clone()
        tokens[:, 8 * K :] = F  # the query tokens pick the all-zero row
        x = self._one_hot.index_select(0, tokens.flatten()).view(B, 9 * K, F)
        info = {"rules": rules, "panels": panels, "perm": perm.contiguous(), "rule_set_index": rule_set_index}
        return Batch(x, panels[:, 2, 2].clone(), info)

    def loss(self, pred: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Mean cross-entropy of the logits `[B, K, F]` over the K answer features (float32)."""
        return torch.nn.functional.cross_entropy(pred.float().flatten(0, 1), batch.y.flatten())

    def metrics(self, pred: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-sample metrics `[B]` from the logits `[B, K, F]`:

        acc          1 if all K features are right;
        feature_acc  fraction of the K features that are right.

        When the batch carries `info["ambiguous"]` (`batch(..., with_ambiguity=True)`), also
        unambiguous          1 for instances with a unique answer;
        correct_unambiguous  acc * unambiguous.
        Averaged over samples, their ratio is the accuracy on unambiguous instances (see
        `summarize`); keeping the two apart keeps every per-sample value finite.
        """
        correct = pred.detach().argmax(dim=-1) == batch.y  # [B, K]
        acc = correct.all(dim=1).float()
        metrics = {"acc": acc, "feature_acc": correct.float().mean(dim=1)}
        if "ambiguous" in batch.info:
            unambiguous = (~batch.info["ambiguous"]).float()
            metrics.update(unambiguous=unambiguous, correct_unambiguous=acc * unambiguous)
        return metrics

    def summarize(self, mean_metrics: dict[str, float]) -> dict[str, float]:
        """Adds `acc_unambiguous` to metrics averaged over samples (when they contain the
        ambiguity terms): the accuracy on the instances with a unique answer."""
        summary = dict(mean_metrics)
        if mean_metrics.get("unambiguous", 0.0) > 0.0:
            summary["acc_unambiguous"] = mean_metrics["correct_unambiguous"] / mean_metrics["unambiguous"]
        return summary


def _task_split(split: str) -> str:
    """The split whose rule sets `split` samples: 'valid_unpermuted' -> 'valid'."""
    return split.removesuffix("_unpermuted")
