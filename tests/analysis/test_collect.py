"""Latent codes are read at the probe positions of docs/tasks.md (fuzzy logic, SRAVEN), permutations included."""

import torch
from helpers_train import tiny_model_config
from torch import nn

from hyla import Transformer
from hyla.analysis.collect import collect_latents, inverse_permutation, sraven_positions
from hyla.tasks import FuzzyLogic, SRaven

H, LAYERS = 3, 2


def encode(query, key, head, layer):
    """The value a hand-built model puts at latents[layer][b, head, query, key]."""
    return 10_000 * layer + 100 * query + key + head / 4  # exact in float32


class PositionModel(nn.Module):
    """Latent codes that spell out their own (layer, head, query, key) indices."""

    def __init__(self, num_outputs, output_dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))
        self.num_outputs, self.output_dim = num_outputs, output_dim

    def forward(self, x, return_latents=False):
        B, T, _ = x.shape
        q, k, h = torch.meshgrid(torch.arange(T), torch.arange(T), torch.arange(H), indexing="ij")
        latents = [
            encode(q, k, h, layer).permute(2, 0, 1).expand(B, H, T, T).double() * self.scale for layer in range(LAYERS)
        ]
        logits = torch.zeros(B, self.num_outputs, self.output_dim)
        return (logits, latents) if return_latents else logits


def test_fuzzy_logic_code_is_last_token_attending_to_itself():
    task = FuzzyLogic(seq_len=8)
    data = collect_latents(PositionModel(1, 1), task, "valid_fixed_query", 10, batch_size=4, progress=False)
    assert data["codes"].shape == (10, LAYERS, H)
    for layer in range(LAYERS):
        for head in range(H):
            assert (data["codes"][:, layer, head] == encode(7, 7, head, layer)).all()
    assert data["terms"].shape == (10, 2, 4) and data["targets"].shape == (10,)
    assert str(data["split"]) == "valid_fixed_query" and str(data["task"]) == "fuzzy_logic"


def test_sraven_codes_follow_the_feature_permutation():
    task, K = SRaven(), 4
    data = collect_latents(PositionModel(K, 8), task, "valid", 16, batch_size=16, progress=False)
    batch = task.batch("valid", 16, 0)
    perm = batch.info["perm"]
    assert not (perm == torch.arange(K)).all(), "the permuted split must permute"
    assert data["codes"].shape == (16, K, LAYERS, 2, H)
    for b in range(16):
        for f in range(K):
            shown = [int((perm[b, c] == f).nonzero()) for c in range(3)]  # position of feature f per column
            for layer in range(LAYERS):
                for column in range(2):
                    expected = encode(8 * K + shown[2], (6 + column) * K + shown[column], torch.arange(H), layer)
                    assert torch.equal(torch.as_tensor(data["codes"][b, f, layer, column]), expected.float())
            assert data["rules"][b, f] == batch.info["rules"][b, f]
            assert data["targets"][b, f] == batch.y[b, shown[2]]
            assert data["query_positions"][b, f] == shown[2]


def test_sraven_positions_pick_tokens_of_the_same_underlying_feature():
    """Independent of the permutation bookkeeping: the values read at the chosen key tokens and
    the answer at the chosen query position obey the feature's rule along the last row."""
    task, K, F = SRaven(), 4, 8
    batch = task.batch("ood", 512, 3)
    query, keys = sraven_positions(batch.info["perm"], K)
    values = batch.x.argmax(-1)  # [B, 9K]: value shown by each context token
    first, second = values.gather(1, keys[..., 0]), values.gather(1, keys[..., 1])  # [B, K]
    third = batch.y.gather(1, query - 8 * K)
    offsets = {0: (0, 0), 1: (1, 2), 2: (2, 4), 3: (-1, -2), 4: (-2, -4)}
    rules = batch.info["rules"]
    checked = 0
    for rule, (d1, d2) in offsets.items():
        chosen = rules == rule
        assert ((first + d1) % F == second)[chosen].all() and ((first + d2) % F == third)[chosen].all()
        checked += int(chosen.sum())
    assert (((first + second) % F == third)[rules == 5]).all()
    assert (((first - second) % F == third)[rules == 6]).all()
    assert checked > 100


def test_inverse_permutation():
    perm = torch.stack([torch.randperm(6) for _ in range(5)])
    inverse = inverse_permutation(perm)
    assert torch.equal(perm.gather(1, inverse), torch.arange(6).expand(5, 6))


def test_transformer_latents_match_return_latents_indexing():
    cfg = tiny_model_config(mlp_dim=16, mixer="hyla", seq_len=36, input_dim=8, output_dim=8, num_outputs=4)
    model = Transformer(cfg).eval()
    task = SRaven()
    data = collect_latents(model, task, "valid_unpermuted", 8, progress=False)
    batch = task.batch("valid_unpermuted", 8, 0)
    logits, latents = model(batch.x, return_latents=True)
    for layer, a in enumerate(latents):
        for j in range(4):  # unpermuted: query j attends to position j of panels (2,0) and (2,1)
            expected = torch.stack([a[:, :, 32 + j, 24 + j], a[:, :, 32 + j, 28 + j]], dim=1)
            torch.testing.assert_close(torch.as_tensor(data["codes"][:, j, layer]), expected.detach())
    assert (data["predictions"] == logits.argmax(-1).numpy()).all()
    assert model.training is False
