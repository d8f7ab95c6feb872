"""The figures of the paper's claims, drawn from the committed records (hyla.runs.report.figures
says which).

    python experiments/figures.py           write experiments/figures/*.png and figures.json
    python experiments/figures.py --check   exit 1 where figures.json differs from the records
"""

from __future__ import annotations

import argparse
import sys

from hyla.runs.report import figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 where figures.json differs from the records")
    args = parser.parse_args(argv)
    numbers = figures.data()
    if args.check:
        if not figures.up_to_date(numbers):
            print("figures.json is out of date: run python experiments/figures.py", file=sys.stderr)
            return 1
        return 0
    print(figures.write(numbers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
