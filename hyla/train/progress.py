"""What a training shows while it runs: `say` for its messages (stdout, at once) and `StepProgress`
for its steps (stderr): a bar on a terminal; elsewhere (a log file that `tail -f` follows, CI) plain
lines, one per update of the progress, each with the step, the elapsed time and, once the pace is
measured, the ETA."""

from __future__ import annotations

import sys
import time

from tqdm.auto import tqdm

from hyla.utils import elapsed_and_eta

FIRST_LINE_AFTER = 5.0
"""Seconds of steps after a session's first step (which holds warm-ups: the first step of the
optimizer, lazy loading) that measure the pace for the first line and its ETA."""
PROGRESS_EVERY = 30.0
"""Seconds between the lines after the first."""


def say(message: str) -> None:
    """A message of the training on stdout, written at once (not held in a buffer when stdout is a
    file), without breaking a progress bar on a terminal."""
    tqdm.write(message, file=sys.stdout)
    sys.stdout.flush()


class StepProgress:
    """The steps of a training session (`total` in all, `initial` done before it started) on stderr;
    nothing when not `enabled`. A context manager: it closes on exit.

    `update(step, postfix)` after each update (`step`: the updates done; `postfix`: the latest
    training record, shown with the steps). On a terminal a tqdm bar `desc`. Elsewhere a line
    `desc: step 120/200 (60%), 14s elapsed, ETA 9s; loss 0.0312, lr 1.00e-03`: the first once
    `first` seconds of steps after the session's first have measured the pace, then every `every`
    seconds (None: FIRST_LINE_AFTER, PROGRESS_EVERY).
    """

    def __init__(
        self,
        desc: str,
        total: int,
        initial: int,
        enabled: bool = True,
        first: float | None = None,
        every: float | None = None,
    ):
        self.desc, self.total = desc, total
        self.first = FIRST_LINE_AFTER if first is None else first
        self.every = PROGRESS_EVERY if every is None else every
        self.as_lines = enabled and not sys.stderr.isatty()
        self.bar = None
        if enabled and not self.as_lines:
            self.bar = tqdm(total=total, initial=initial, desc=desc, unit="step", dynamic_ncols=True, mininterval=0.5)
        self.start = time.perf_counter()
        self.paced_from: tuple[float, int] | None = None  # (time, step) at the end of the session's first step
        self.next_line = 0.0
        self.postfix: dict = {}

    def __enter__(self) -> StepProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, step: int, postfix: dict | None = None) -> None:
        if postfix is not None:
            self.postfix = postfix
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            if postfix is not None:
                self.bar.set_postfix(postfix, refresh=False)
        if not self.as_lines:
            return
        now = time.perf_counter()
        if self.paced_from is None:
            self.paced_from, self.next_line = (now, step), now + self.first
        elif now >= self.next_line:
            self.next_line = now + self.every
            print(self.line(step, now), file=sys.stderr, flush=True)

    def line(self, step: int, now: float) -> str:
        """`desc: step S/N (P%), elapsed, ETA; postfix` (the ETA from the pace after the first step)."""
        since, paced_step = self.paced_from
        percent = 100 * step // self.total
        times = elapsed_and_eta(now - self.start, (now - since, step - paced_step), self.total - step)
        text = f"{self.desc}: step {step}/{self.total} ({percent}%), {times}"
        if self.postfix:
            text += "; " + ", ".join(f"{key} {value}" for key, value in self.postfix.items())
        return text

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
