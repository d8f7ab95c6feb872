"""The paper's report: README's results table, RESULTS.md's tables, the claims table, the figures and
the SRAVEN budget curves, every number rebuilt from committed files (experiments/results/,
benchmarks/results/). One module per part of the report, each a recipe over the shared readers
(`files`) and cells (`cells`), which format as `hyla results` does (hyla.analysis.tables);
`tables` writes and checks them. The commands are the scripts in experiments/: claims.py,
figures.py and sraven_budget.py."""
