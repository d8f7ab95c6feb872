"""Latent-code interventions: test the hypernetwork hypothesis causally (docs/interventions.md).

If the latent code `z_qk = a[b, :, q, k]` (docs/math.md) tells the value network which operation to
carry out, then running a query on task A with the codes that the same query computes on task B
should make the network carry out B's operation.

The experiments (`fuzzy_logic_interventions`, `sraven_interventions`; `interventions` for one model,
`hyla interventions RUN [RUN ...]`) patch the codes with `patch_latents` (hyla.analysis.patching) and
score how far the prediction moves toward B's on a calibrated scale (`Scale`: 0 = unpatched, 1 = B's
own prediction), beside three controls (the leak control: B's query against A's keys; a random other
task's codes; B's codes with the heads shuffled) and the scores of reference predictions (constant,
a perfect random task, wrecked): per condition the mean ± s.e. and the median with a bootstrap 95%
interval over queries. `hyla.analysis.intervention_report` summarizes several models.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from hyla.analysis.collect import FUZZY_LOGIC, SRAVEN, task_kind
from hyla.analysis.patching import LatentPatch, attention_layers, pair_mask, patch_latents
from hyla.nn.attention import MultiHeadAttention
from hyla.ops.kernels.naive import normalize, raw_scores
from hyla.train.progress import Stages

CONDITIONS = ("patched", "query_side", "random_donor", "shuffled_heads")
"""what is patched into A's run: B's codes; the leak control (B's query state against A's keys);
a random other task's codes; B's codes with the heads permuted"""
REFERENCES = {
    FUZZY_LOGIC: ("unpatched", "donor_run", "constant", "random_task", "wrecked"),
    SRAVEN: ("unpatched", "donor_target", "constant", "random_rule", "wrecked"),
}
"""predictions scored beside the patches (docs/interventions.md): 0, 1, and what no transfer scores"""
SITES = ("probe", "row")
SPLITS = ("valid", "ood")
MIN_GAP = 0.1
"""a query is scored only where its 0 and 1 lie this far apart (and, fuzzy logic, A's and B's targets)"""
CONSTANT_SAMPLES = 4096
DISTRIBUTE_THREE = 7
BOOTSTRAP_RESAMPLES = 2000
"""draws of the bootstrap interval of the median (`median_interval`)"""


# ============================================================================= running patched models
def layer_settings(num_layers: int) -> dict[str, list[int]]:
    """{"layer 0": [0], ..., "all layers": [0, ..., L-1]}: each layer alone, then all together."""
    return {**{f"layer {i}": [i] for i in range(num_layers)}, "all layers": list(range(num_layers))}


@torch.no_grad()
def model_codes(model, x: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(logits, codes per layer [N, H, T, T]) of an unpatched run, in chunks of batch_size."""
    logits, codes = [], []
    for start in range(0, len(x), batch_size):
        out, latents = model(x[start : start + batch_size], return_latents=True)
        logits.append(out)
        codes.append(latents)
    return torch.cat(logits), [torch.cat(layer) for layer in zip(*codes)]


@torch.no_grad()
def patched_logits(
    model,
    x: torch.Tensor,
    layers: list[int],
    codes: list[torch.Tensor] | None,
    where: torch.Tensor | None,
    batch_size: int,
) -> torch.Tensor:
    """Logits of `model(x)` with `layers` patched by `codes` (per model layer, [N, ...]) at `where`."""
    out = []
    for start in range(0, len(x), batch_size):
        rows = slice(start, start + batch_size)
        chunk = None if codes is None else {i: codes[i][rows] for i in layers}
        chunk_where = None if where is None else where[rows] if where.shape[0] > 1 else where
        with patch_latents(model, layer=layers, codes=chunk, where=chunk_where):
            out.append(model(x[rows]))
    return torch.cat(out)


def shuffle_heads(codes: list[torch.Tensor], generator: torch.Generator) -> list[torch.Tensor]:
    """The shuffled-heads control: per sample and layer a random permutation of the head axis of
    codes [N, H, T, T] (the code's values kept, their assignment to the heads' weights broken)."""
    shuffled = []
    for layer_codes in codes:
        N, H = layer_codes.shape[:2]
        perm = torch.rand(N, H, generator=generator).argsort(1).to(layer_codes.device)  # [N, H]
        shuffled.append(layer_codes.gather(1, perm[:, :, None, None].expand_as(layer_codes)))
    return shuffled


class ProjectionRecorder(LatentPatch):
    """A patch that replaces no code and keeps the queries, keys, bias and mask of its layer's call."""

    def __init__(self, module: MultiHeadAttention, index: int):
        super().__init__(module, index, None, None)
        self.inputs: tuple | None = None

    def __call__(self, q, k, v, *, bias=None, mask=None, dropout_mask=None):
        self.inputs = (q, k, bias, mask)
        return super().__call__(q, k, v, bias=bias, mask=mask, dropout_mask=dropout_mask)


def layer_projections(model, x: torch.Tensor) -> list[tuple]:
    """Per layer (q [B, T, H, Dk], k [B, T, H, Dk], bias, mask) of a run on x [B, T, ...]."""
    layers = attention_layers(model)
    recorders = [ProjectionRecorder(layer, i) for i, layer in enumerate(layers)]
    try:
        for layer, recorder in zip(layers, recorders):
            layer.latent_patch = recorder
        model(x, return_latents=True)  # every query position (a plain call prunes the last block's)
    finally:
        for layer in layers:
            layer.latent_patch = None
    return [recorder.inputs for recorder in recorders]


@torch.no_grad()
def query_side_codes(model, x_query: torch.Tensor, x_keys: torch.Tensor, batch_size: int) -> list[torch.Tensor]:
    """The leak control's codes, per layer [N, H, T, T]: the queries of the run on x_query (B's
    sequence) against the keys (and bias, mask) of the run on x_keys (A's), normalized as the layer
    normalizes. B's examples reach these codes only through what the query's own state has read of
    B's context, never through B's keys."""
    layers, chunks = attention_layers(model), []
    for start in range(0, len(x_keys), batch_size):
        rows = slice(start, start + batch_size)
        donor, own = layer_projections(model, x_query[rows]), layer_projections(model, x_keys[rows])
        chunks.append(
            [
                normalize(raw_scores(q_donor, k_own, bias), layer.mixer.normalization, mask)
                for layer, (q_donor, *_), (_, k_own, bias, mask) in zip(layers, donor, own)
            ]
        )
    return [torch.cat(layer) for layer in zip(*chunks)]


UNPATCHED_AND_DONOR_RUNS = 4
"""The runs before any patch: A's and B's sequences, the leak control's and the random donor's."""


def unpatched_and_donor_runs(
    model, x_a, x_b, x_c, batch_size: int, generator, tick: Callable[[], None]
) -> tuple[torch.Tensor, torch.Tensor, dict[str, list[torch.Tensor]]]:
    """(A's logits, B's logits, the codes per layer that each condition of CONDITIONS patches into
    A's run) from the UNPATCHED_AND_DONOR_RUNS runs; `tick()` after each."""
    logits_a, _ = model_codes(model, x_a, batch_size)
    tick()
    logits_b, codes_b = model_codes(model, x_b, batch_size)
    tick()
    query_side = query_side_codes(model, x_b, x_a, batch_size)
    tick()
    random_donor = model_codes(model, x_c, batch_size)[1]
    tick()
    donors = {
        "patched": codes_b,
        "query_side": query_side,
        "random_donor": random_donor,
        "shuffled_heads": shuffle_heads(codes_b, generator),
    }
    return logits_a, logits_b, donors


def intervene(
    model,
    x: torch.Tensor,
    donors: dict[str, list[torch.Tensor]],
    wheres: dict[str, torch.Tensor],
    score,
    batch_size: int,
    tick: Callable[[], None],
) -> dict:
    """{site: {layer setting: {condition: score(logits)}}} for every site's `where`, every layer
    setting (`layer_settings`) and every donor condition (codes per layer); `tick()` after each."""
    settings = layer_settings(len(attention_layers(model)))
    results: dict = {}
    for site, where in wheres.items():
        for name, layers in settings.items():
            for condition, codes in donors.items():
                logits = patched_logits(model, x, layers, codes, where, batch_size)
                results.setdefault(site, {}).setdefault(name, {})[condition] = score(logits)
                tick()
    return results


# ============================================================================= the calibrated score
def mean_se(values: torch.Tensor) -> dict[str, float | None]:
    """values [n] -> {"mean", "se"} (se = standard deviation / sqrt(n)); None where undefined."""
    n = len(values)
    return {
        "mean": values.mean().item() if n else None,
        "se": (values.std() / n**0.5).item() if n > 1 else None,
    }


def median_interval(samples: list[np.ndarray], seed: int, resamples: int = BOOTSTRAP_RESAMPLES) -> dict:
    """The median of the pooled per-query scores of one or more models (`samples`: per model its
    scores [n_m]) -> {"median", "median_ci": [low, high]}, the percentile 95% bootstrap interval:
    each draw picks models with replacement, then each picked model's queries with replacement, and
    takes the median of the pool (one model: its queries resampled). A fresh numpy Generator from
    `seed` per call: deterministic, and the same draws for every statistic of the same sizes."""
    samples = [np.asarray(s, dtype=np.float64) for s in samples if len(s)]
    if not samples:
        return {"median": None, "median_ci": None}
    rng = np.random.default_rng(seed)
    sizes = np.array([len(s) for s in samples])  # [M]
    padded = np.full((len(samples), sizes.max()), np.nan)  # [M, n_max]
    for m, s in enumerate(samples):
        padded[m, : len(s)] = s
    models = rng.integers(len(samples), size=(resamples, len(samples)))  # [R, M]
    picked = sizes[models][..., None]  # [R, M, 1]
    queries = (rng.random((resamples, len(samples), sizes.max())) * picked).astype(np.int64)  # [R, M, n_max]
    draws = np.where(np.arange(sizes.max()) < picked, padded[models[..., None], queries], np.nan)
    draws = np.sort(draws.reshape(resamples, -1), axis=1)  # [R, M * n_max], the NaNs last
    count, rows = picked.sum((1, 2)), np.arange(resamples)  # [R]: the pool's size
    medians = (draws[rows, (count - 1) // 2] + draws[rows, count // 2]) / 2  # [R]
    low, high = np.percentile(medians, [2.5, 97.5])
    return {"median": float(np.median(np.concatenate(samples))), "median_ci": [float(low), float(high)]}


def query_stats(scores: torch.Tensor, seed: int) -> dict:
    """Per-query scores [n] -> {"mean", "se", "median", "median_ci", "scores"} (`scores` as a numpy
    array, for summaries over models; `intervention_report` does not write it)."""
    values = scores.double().cpu()
    return {**mean_se(values), **median_interval([values.numpy()], seed), "scores": values.numpy()}


@dataclass
class Scale:
    """The axis of the calibrated transfer score, per query: `measure(logits)` [N] is the quantity
    that moves, `start` [N] its unpatched value (score 0), `end` [N] its value for B's answer (score
    1). Queries whose start and end lie less than MIN_GAP apart are not scored (no move is visible).
    `seed` seeds the bootstrap interval of the median (`query_stats`)."""

    measure: Callable[[torch.Tensor], torch.Tensor]
    start: torch.Tensor
    end: torch.Tensor
    seed: int

    @property
    def scored(self) -> torch.Tensor:
        """bool [N]: the queries the score averages over."""
        return (self.end - self.start).abs() >= MIN_GAP

    def of_values(self, values: torch.Tensor) -> dict:
        """values [N] of the measure -> `query_stats` over the scored queries of
        (value − start) / (end − start)."""
        keep = self.scored
        return query_stats((values - self.start)[keep] / (self.end - self.start)[keep], self.seed)

    def of_logits(self, logits: torch.Tensor) -> dict:
        return self.of_values(self.measure(logits))


# ============================================================================= fuzzy logic
def term_digits(term_indices: torch.Tensor, num_variables: int) -> torch.Tensor:
    """[..., K] term indices -> [..., K, L] digits (variable 0 most significant; 1 = literal x_i)."""
    shifts = torch.arange(num_variables - 1, -1, -1, device=term_indices.device)
    return (term_indices[..., None] >> shifts) & 1


def fuzzy_logic_targets(term_indices: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """f(x) = max_k min_i literal_ki(x) of the task `term_indices` [K] at inputs [N, T, L] -> [N, T]."""
    digits = term_digits(term_indices, inputs.shape[-1]).to(inputs)  # [K, L]
    literals = 1.0 - (inputs[:, :, None, :] - digits).abs()  # [N, T, K, L]
    return literals.amin(-1).amax(-1)


def fuzzy_logic_sequences(term_indices: torch.Tensor, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences of one task on given inputs [N, T, L] -> (x [N, T, L+1] with the query's y zeroed,
    the query's target [N]), laid out as `FuzzyLogic.batch`."""
    targets = fuzzy_logic_targets(term_indices, inputs)  # [N, T]
    x = torch.cat([inputs, targets[..., None]], -1)
    x[:, -1, -1] = 0.0
    return x, targets[:, -1]


def sharing_pairs(tasks: torch.Tensor) -> torch.Tensor:
    """Ordered pairs (i, j) of rows of tasks [N, K] that share all but one term -> [P, 2]."""
    same = (tasks[:, None, :, None] == tasks[None, :, None, :]).any(-1).sum(-1)  # [N, N] shared terms
    return torch.nonzero(same == tasks.shape[1] - 1)


def fuzzy_logic_pairs(task, split: str, num_pairs: int, samples: int, generator: torch.Generator) -> dict | None:
    """Sequences for the pairs (A, B) of `split`'s tasks that share one term: the same inputs under
    A, under B, and under a random other task C of the split (or of all seen tasks when the split
    has no third); only queries where A's and B's targets differ by MIN_GAP. None: no pair."""
    tasks = task.split_tasks(split).cpu()  # [N, K]
    pairs = sharing_pairs(tasks)
    if not len(pairs):
        return None
    pairs = pairs[torch.randperm(len(pairs), generator=generator)[:num_pairs]]
    others = tasks if len(tasks) > 2 else torch.cat([task.split_tasks(s).cpu() for s in ("train", "ood")])
    parts: dict[str, list] = {}
    for a, b in pairs.tolist():
        candidates = [c for c in others.tolist() if c not in (tasks[a].tolist(), tasks[b].tolist())]
        candidates = candidates or [tasks[b].tolist()]  # (no third task: the control is B itself)
        c = torch.tensor(candidates[int(torch.randint(len(candidates), (), generator=generator))])
        inputs = torch.rand(8 * samples, task.seq_len, task.num_variables, generator=generator)
        (x_a, y_a), (x_b, y_b), (x_c, y_c) = (fuzzy_logic_sequences(t, inputs) for t in (tasks[a], tasks[b], c))
        keep = torch.nonzero((y_a - y_b).abs() >= MIN_GAP)[:samples, 0]
        for name, value in (("x_a", x_a), ("x_b", x_b), ("x_c", x_c), ("y_a", y_a), ("y_b", y_b), ("y_c", y_c)):
            parts.setdefault(name, []).append(value[keep])
        parts.setdefault("pairs", []).append(
            {"a": tasks[a].tolist(), "b": tasks[b].tolist(), "random_task": c.tolist(), "sequences": len(keep)}
        )
    data = {name: torch.cat(values) for name, values in parts.items() if name != "pairs"}
    return {**data, "pairs": parts["pairs"]}


def mean_training_target(task, seed: int) -> float:
    """The constant reference prediction: the mean query target of CONSTANT_SAMPLES training sequences."""
    return task.batch("train", CONSTANT_SAMPLES, seed).y.double().mean().item()


def fuzzy_logic_interventions(
    model,
    task,
    num_pairs: int = 16,
    samples: int = 32,
    seed: int = 0,
    batch_size: int = 512,
    stage: Stages | None = None,
) -> dict:
    """The fuzzy-logic experiment (docs/interventions.md) on the splits `valid` (pairs of training
    tasks) and `ood` (pairs of held-out combinations): A's context, the query's codes from B's
    context (same inputs); per site, layer setting and condition the calibrated transfer (`Scale`:
    0 = the model's prediction on A's sequence, 1 = its prediction on B's), and the references.
    stage: progress lines (None: none)."""
    stage = stage or Stages(False)
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    constant = mean_training_target(task, seed)
    results = {}
    for split in SPLITS:
        data = fuzzy_logic_pairs(task, split, num_pairs, samples, generator) if len(task.split_tasks(split)) else None
        if data is None:
            results[split] = {"num_pairs": 0, "num_sequences": 0}
            continue
        pairs, sequences = len(data["pairs"]), len(data["y_a"])
        stage(f"fuzzy logic {split}: {pairs} task pairs, {sequences} sequences")
        x_a, x_b, x_c = (data[name].to(device) for name in ("x_a", "x_b", "x_c"))
        logits_a, logits_b, donors = unpatched_and_donor_runs(
            model, x_a, x_b, x_c, batch_size, generator, before_patches_counter(stage, split)
        )
        prediction = lambda logits: logits.reshape(-1).double().cpu()  # noqa: E731  [N]
        scale = Scale(prediction, prediction(logits_a), prediction(logits_b), seed)
        T, N = task.seq_len, len(x_a)
        last = torch.full((N,), T - 1, device=device)
        wheres = {"probe": pair_mask(last, T, last[:, None]), "row": pair_mask(last, T)}
        reference = {
            "unpatched": scale.of_logits(logits_a),
            "donor_run": scale.of_logits(logits_b),
            "constant": scale.of_values(torch.full_like(scale.start, constant)),
            "random_task": scale.of_values(data["y_c"].double()),  # a model that carries out C exactly
            "wrecked": scale.of_values(scale.start[torch.randperm(N, generator=generator)]),
        }
        everything = layer_settings(len(attention_layers(model)))["all layers"]
        results[split] = {
            "num_pairs": len(data["pairs"]),
            "num_sequences": N,
            "num_scored": int(scale.scored.sum()),
            "pairs": data["pairs"],
            "reference": reference,
            "reference_formula": scale.of_logits(patched_logits(model, x_a, everything, None, None, batch_size)),
            "sites": intervene(
                model, x_a, donors, wheres, scale.of_logits, batch_size, patch_counter(stage, model, split)
            ),
        }
    return results


def before_patches_counter(stage: Stages, split: str) -> Callable[[], None]:
    """The `tick` of the runs on a split before any patch (progress with an ETA)."""
    return stage.counter(f"{split}: unpatched and donor runs", UNPATCHED_AND_DONOR_RUNS)


def patch_counter(stage: Stages, model, split: str) -> Callable[[], None]:
    """The `tick` of the patched runs that `intervene` makes on a split (progress with an ETA)."""
    runs = len(SITES) * len(layer_settings(len(attention_layers(model)))) * len(CONDITIONS)
    return stage.counter(f"{split}: patched runs", runs)


# ============================================================================= SRAVEN
def implied_answers(first: torch.Tensor, second: torch.Tensor, num_values: int) -> torch.Tensor:
    """The answers each rule 0-6 implies for a row that starts (first, second) [N]: -> [N, 7, 2]
    (two readings per rule, equal where only one exists): constant (first | second), progression
    d (first + 2d | second + d), addition first + second, subtraction first - second (mod F)."""
    u, w = first[:, None], second[:, None]
    steps = torch.tensor([0, 1, 2, -1, -2], device=first.device)
    from_first = torch.cat([u + 2 * steps, u + w, u - w], 1)  # [N, 7]
    from_second = torch.cat([w + steps, u + w, u - w], 1)
    return torch.stack([from_first, from_second], -1).remainder(num_values)


def sraven_pairs(task, split: str, count: int, seed: int, generator: torch.Generator) -> dict | None:
    """Instances A of `<split>_unpermuted`, a feature f each, and from a pool of the same split a
    donor whose rule for f differs (rules 0-6, and A's answer not among the donor rule's
    `implied_answers` for A's row), plus a random other instance (control). None: no donor found."""
    K, F = task.num_features, task.num_values
    name = f"{split}_unpermuted"
    a_batch, pool = task.batch(name, count, 2 * seed), task.batch(name, 8 * count, 2 * seed + 1)
    rules_a, panels = a_batch.info["rules"].cpu(), a_batch.info["panels"].cpu()  # [N, K], [N, 3, 3, K]
    feature = torch.randint(K, (count,), generator=generator)
    rows = torch.arange(count)
    last_row = panels[rows, 2, :, feature]  # [N, 3]: feature f in the last row
    implied = implied_answers(last_row[:, 0], last_row[:, 1], F)  # [N, 7, 2]
    usable = (implied != last_row[:, 2, None, None]).all(-1)  # [N, 7]: rules that change A's answer
    usable &= torch.arange(7) != rules_a[rows, feature][:, None]
    pool_rules = pool.info["rules"].cpu()[:, feature].T  # [N, M]: the pool's rule of each A's feature
    candidate = (pool_rules < DISTRIBUTE_THREE) & usable.gather(1, pool_rules.clamp(max=6))
    donor = (torch.rand(candidate.shape, generator=generator) * candidate).argmax(1)  # [N]
    found = candidate[rows, donor]
    other = torch.randint(len(pool_rules[0]), (count,), generator=generator)
    other = torch.where(other == donor, (other + 1) % len(pool_rules[0]), other)
    if not found.any():
        return None
    keep = torch.nonzero(found)[:, 0]
    rule_b = pool_rules[keep, donor[keep]]
    return {
        "x_a": a_batch.x.cpu()[keep],
        "x_b": pool.x.cpu()[donor[keep]],
        "x_c": pool.x.cpu()[other[keep]],
        "feature": feature[keep],
        "rule_a": rules_a[keep, feature[keep]],
        "rule_b": rule_b,
        "target_a": last_row[keep, 2],
        "implied": implied[keep],
        "implied_b": implied[keep, rule_b],
    }


def feature_probabilities(logits: torch.Tensor, feature: torch.Tensor) -> torch.Tensor:
    """logits [N, K, F] -> the predicted distribution [N, F] (float64, CPU) of feature f per grid."""
    return logits.double().cpu()[torch.arange(len(logits)), feature].softmax(-1)


def answer_mass(probabilities: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
    """The probability [N] that distributions [N, F] give to a set of answers [N, 2] (two readings,
    equal where there is one)."""
    first, second = probabilities.gather(1, answers).unbind(1)
    return first + torch.where(answers[:, 0] != answers[:, 1], second, 0.0)


def answers_distribution(answers: torch.Tensor, num_values: int) -> torch.Tensor:
    """[N, 2] answers -> [N, F]: the distribution of a model that gives them (half each reading)."""
    probabilities = torch.zeros(len(answers), num_values, dtype=torch.float64)
    return probabilities.scatter_add_(1, answers, torch.full(answers.shape, 0.5, dtype=torch.float64))


def sraven_interventions(
    model, task, count: int = 512, seed: int = 0, batch_size: int = 512, stage: Stages | None = None
) -> dict:
    """The SRAVEN experiment (docs/interventions.md) on `valid_unpermuted` and `ood_unpermuted`:
    A's grid, the answer token of feature f patched with the donor's codes of that token, per site
    (probe: its codes to feature f in panels (2,0), (2,1); row: to every key), layer setting and
    condition the calibrated transfer (`Scale` on the probability of B's answers: 0 = unpatched,
    1 = all of it on the answers B's rule implies for A's row), and the references.
    stage: progress lines (None: none)."""
    stage = stage or Stages(False)
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    K, F, results = task.num_features, task.num_values, {}
    for split in SPLITS:
        data = sraven_pairs(task, split, count, seed, generator) if len(task.split_tasks(split)) else None
        if data is None:
            results[split] = {"num_sequences": 0}
            continue
        N, T = len(data["x_a"]), task.seq_len
        stage(f"SRAVEN {split}: {N} grids")
        x_a, x_b, x_c = (data[name].to(device) for name in ("x_a", "x_b", "x_c"))
        logits_a, _, donors = unpatched_and_donor_runs(
            model, x_a, x_b, x_c, batch_size, generator, before_patches_counter(stage, split)
        )
        feature, answers_b = data["feature"], data["implied_b"]
        mass_on_b = lambda logits: answer_mass(feature_probabilities(logits, feature), answers_b)  # noqa: E731
        scale = Scale(mass_on_b, mass_on_b(logits_a), torch.ones(N, dtype=torch.float64), seed)
        query = (8 * K + feature).to(device)
        keys = torch.stack([6 * K + feature, 7 * K + feature], 1).to(device)
        wheres = {"probe": pair_mask(query, T, keys), "row": pair_mask(query, T)}
        random_rule = data["rule_b"][torch.randint(N, (N,), generator=generator)]  # drawn from the donor set
        random_answers = data["implied"][torch.arange(N), random_rule]  # [N, 2]
        reference = {
            "unpatched": scale.of_logits(logits_a),
            "donor_target": scale.of_values(scale.end),
            "constant": scale.of_values(answer_mass(torch.full((N, F), 1 / F, dtype=torch.float64), answers_b)),
            "random_rule": scale.of_values(answer_mass(answers_distribution(random_answers, F), answers_b)),
            "wrecked": scale.of_values(
                answer_mass(feature_probabilities(logits_a, feature)[torch.randperm(N, generator=generator)], answers_b)
            ),
        }
        rule_pairs, counts = torch.unique(torch.stack([data["rule_a"], data["rule_b"]], 1), dim=0, return_counts=True)
        results[split] = {
            "num_sequences": N,
            "num_scored": int(scale.scored.sum()),
            "rule_pairs": {f"{a}->{b}": n for (a, b), n in zip(rule_pairs.tolist(), counts.tolist())},
            "reference": reference,
            "reference_formula": scale.of_logits(
                patched_logits(model, x_a, list(range(len(attention_layers(model)))), None, None, batch_size)
            ),
            "sites": intervene(
                model, x_a, donors, wheres, scale.of_logits, batch_size, patch_counter(stage, model, split)
            ),
        }
    return results


# ============================================================================= one model
def interventions(
    model,
    task,
    num_pairs: int = 16,
    samples: int = 32,
    seed: int = 0,
    batch_size: int = 512,
    stage: Stages | None = None,
    metadata: dict | None = None,
) -> dict:
    """Both experiments' entry point for one model: {"task", "conditions", "references", "sites",
    "layer_settings", "options", "model": metadata, "splits": {split: ...}}.
    num_pairs: task pairs per split (fuzzy logic); SRAVEN uses num_pairs·samples grids per split.
    seed: the task pairs, controls and bootstrap intervals; stage: progress lines (None: none)."""
    kind = task_kind(task)
    was_training = model.training
    model.eval()
    try:
        if kind == FUZZY_LOGIC:
            splits = fuzzy_logic_interventions(model, task, num_pairs, samples, seed, batch_size, stage)
        else:
            splits = sraven_interventions(model, task, num_pairs * samples, seed, batch_size, stage)
    finally:
        model.train(was_training)
    return {
        "task": kind,
        "conditions": list(CONDITIONS),
        "references": list(REFERENCES[kind]),
        "sites": list(SITES),
        "layer_settings": list(layer_settings(len(attention_layers(model)))),
        "options": {"tasks": num_pairs, "samples": samples, "seed": seed},
        "model": metadata or {},
        "splits": splits,
    }
