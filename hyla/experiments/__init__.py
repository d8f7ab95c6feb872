"""The experiments workflow: sweeps of runs (local or Slurm), their aggregated results, and the demo."""
