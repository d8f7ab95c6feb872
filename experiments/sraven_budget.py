"""SRAVEN OOD panel accuracy against examples seen: the paper's budget (20M examples, 156,250 steps of
128) beside the quarter budget (40k steps) and the paper's Table A1 end points, on one set of axes
(hyla.runs.report.sraven_budget says what is written, and how the resume copies work).

    python experiments/sraven_budget.py                              # from the committed records
    python experiments/sraven_budget.py --snapshot runs/table_a1_raven_20m_cpu   # + runs under way
    python experiments/sraven_budget.py --restore runs/table_a1_raven_20m_cpu    # on a new machine
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hyla.runs.report import sraven_budget as budget


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--snapshot",
        type=Path,
        help="a sweep's run folder: take in what completed runs wrote, record the others, save what they resume from",
    )
    parser.add_argument("--restore", type=Path, help="a sweep's run folder: put the saved resume state back into it")
    args = parser.parse_args(argv)
    if args.restore:
        saved = budget.restore_resume_state(args.restore)
        print("\n".join(saved) or f"nothing saved in {budget.RESUME.relative_to(budget.ROOT)}")
        return 0
    if args.snapshot:
        if not args.snapshot.is_dir():
            parser.error(f"--snapshot {args.snapshot}: no such folder")
        collected = budget.collect_completed(args.snapshot)
        for line in collected + budget.snapshot(args.snapshot) + budget.save_resume_state(args.snapshot):
            print(line)
    print(budget.write_curves())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
