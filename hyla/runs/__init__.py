"""Making and reading runs: sweeps of runs (sweep.py; launched locally or on Slurm, launch.py), their
records (records.py) and aggregated results (`hyla results`: results.py, result_tables.py,
result_figures.py), exported models (export.py), the demo, the paper's Table A1 (paper.py) and the
paper's report built from the committed results (report/)."""
