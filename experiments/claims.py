"""README's results table and RESULTS.md's tables, every number rebuilt from committed files
(hyla.runs.report: one module per part of the report; the tables and the checked prose:
hyla.runs.report.tables).

    python experiments/claims.py           print the tables
    python experiments/claims.py --write   write them into README.md and experiments/RESULTS.md
    python experiments/claims.py --check   exit 1 where a committed table or a number in prose differs

Edit a table's rows in experiments/claims_tables.md, never in place.
"""

from __future__ import annotations

import argparse
import sys

from hyla.runs.report import tables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the tables in README.md and RESULTS.md")
    parser.add_argument("--check", action="store_true", help="exit 1 where a committed table differs")
    args = parser.parse_args(argv)
    return tables.update(write=args.write, check=args.check)


if __name__ == "__main__":
    sys.exit(main())
