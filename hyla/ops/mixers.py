"""The attention family as three axes: normalization × value network × activation (docs/math.md)."""

from __future__ import annotations

from dataclasses import dataclass

NORMALIZATIONS = ("softmax", "none", "rms_head")
VALUE_NETWORKS = ("linear", "mlp")
ACTIVATIONS = ("relu", "gelu", "silu", "sigmoid", "tanh", "identity")


def check_choice(what: str, value: str, choices) -> None:
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r}; valid: {', '.join(choices)}")


@dataclass(frozen=True)
class Mixer:
    """One point of the ablation grid. `activation` only matters for the `mlp` value network."""

    normalization: str
    value_network: str
    activation: str = "relu"

    def __post_init__(self):
        check_choice("normalization", self.normalization, NORMALIZATIONS)
        check_choice("value_network", self.value_network, VALUE_NETWORKS)
        check_choice("activation", self.activation, ACTIVATIONS)


def check_axes(normalization: str, value_network: str, activation: str) -> None:
    """Raise `Mixer`'s one-line error unless the three axes name a point of the grid. Builds no
    Mixer when they do: `attention` checks its axes on every call."""
    if normalization not in NORMALIZATIONS or value_network not in VALUE_NETWORKS or activation not in ACTIVATIONS:
        Mixer(normalization, value_network, activation)


# hyla name -> (authors' name, mixer)
NAMED_MIXERS: dict[str, tuple[str, Mixer]] = {
    "softmax": ("softmax_attention", Mixer("softmax", "linear")),
    "linear": ("linear_attention", Mixer("none", "linear")),
    "hyla": ("linear_hypatt", Mixer("rms_head", "mlp", "relu")),
    "linear_rms_head": ("linear_attention_rms_head", Mixer("rms_head", "linear")),
    "hyla_no_rms_head": ("linear_hypatt_no_rms_head", Mixer("none", "mlp", "relu")),
    "hyla_identity": ("linear_hypatt_mlp_linear", Mixer("rms_head", "mlp", "identity")),
    "hyla_identity_no_rms_head": ("linear_hypatt_mlp_linear_no_rms_head", Mixer("none", "mlp", "identity")),
    "softmax_hyla": ("softmax_hypatt", Mixer("softmax", "mlp", "relu")),
}
AUTHOR_NAMES = {author: name for name, (author, _) in NAMED_MIXERS.items()}


def canonical_mixer_name(name: str) -> str:
    """Map a hyla or authors' mixer name to the hyla name."""
    if name in NAMED_MIXERS:
        return name
    if name in AUTHOR_NAMES:
        return AUTHOR_NAMES[name]
    valid = ", ".join(f"{n} ({a})" for n, (a, _) in NAMED_MIXERS.items())
    raise ValueError(f"unknown mixer {name!r}; valid names (authors' names in brackets): {valid}")


def resolve_mixer(
    name: str | None = None,
    *,
    normalization: str | None = None,
    value_network: str | None = None,
    activation: str | None = None,
) -> Mixer:
    """A mixer from a name, from the three axes, or from a name with some axes overridden.

    >>> resolve_mixer("hyla", activation="silu")
    Mixer(normalization='rms_head', value_network='mlp', activation='silu')
    """
    if name is None:
        if normalization is None or value_network is None:
            raise ValueError("give a mixer name or both normalization and value_network")
        return Mixer(normalization, value_network, activation or "relu")
    base = NAMED_MIXERS[canonical_mixer_name(name)][1]
    return Mixer(
        normalization or base.normalization,
        value_network or base.value_network,
        activation or base.activation,
    )
