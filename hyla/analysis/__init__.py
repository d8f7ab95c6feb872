"""Latent-code analysis (docs/math.md, docs/tasks.md): collection, probes, topographic similarity, figures,
reports, interventions. `hyla analyze RUN` runs `analyze_run`; training loops can call `analysis_hook`;
`patch_latents` replaces latent codes (`hyla interventions RUN`, docs/interventions.md)."""

from hyla.analysis.collect import collect_latents, load_latents, save_latents
from hyla.analysis.patching import patch_latents
from hyla.analysis.pipeline import analysis_hook, analyze, analyze_run
from hyla.analysis.probes import logistic_classification_probe, logistic_f1_per_label, ridge_probe
from hyla.analysis.topographic import topographic_similarity

__all__ = [
    "collect_latents",
    "save_latents",
    "load_latents",
    "analyze",
    "analyze_run",
    "analysis_hook",
    "ridge_probe",
    "logistic_f1_per_label",
    "logistic_classification_probe",
    "topographic_similarity",
    "patch_latents",
]
