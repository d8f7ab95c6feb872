"""What the long commands show while they run (train, sweep and demo, results, analyze, interventions),
one way: `StepProgress` for a count (steps, runs, batches) on stderr: a tqdm bar on a terminal;
elsewhere (a log file that `tail -f` follows, CI) plain lines with the count, the elapsed time and,
once the pace is measured, the ETA, one every PROGRESS_EVERY seconds. `Stages` adds a line per stage
of an analysis; `say` writes a training's messages (stdout, at once)."""

from __future__ import annotations

import sys
import threading
import time

from tqdm.auto import tqdm

from hyla.utils import duration, elapsed_and_eta

FIRST_LINE_AFTER = 5.0
"""Seconds of pace, measured from the count's first move, before the first line with an ETA."""
PROGRESS_EVERY = 30.0
"""Seconds between progress lines in a log: the one interval of every progress report."""


def say(message: str) -> None:
    """A message of the training on stdout, written at once (not held in a buffer when stdout is a
    file), without breaking a progress bar on a terminal."""
    tqdm.write(message, file=sys.stdout)
    sys.stdout.flush()


class StepProgress:
    """A count on stderr: `total` items (`unit`s: steps, runs, batches), `done` of them before it
    started; nothing when not `enabled`. A context manager: it closes on exit.

    `update(done, postfix)` as the count changes, or to poll it (`postfix`: e.g. the latest training
    record, or a text, shown with the count until the next). On a terminal a tqdm bar `desc`.
    Elsewhere, on an update, a line `desc: step 120/200 (60%), 14s elapsed, ETA 9s; loss 0.0312`:
    the first with an ETA once the pace has been measured for `first` seconds, and one whenever
    `every` seconds have passed since the last line or the start (None: FIRST_LINE_AFTER,
    PROGRESS_EVERY). `close(outcome)` ends it with the line `desc: OUTCOME`.

    The pace, the ETA from it and a bar's rate leave out the time until the count first moves
    (warm-ups, a start-up, a resumed run's loading, steps that appear in one go) and the updates
    with `timed=False` (an item read from a cache)."""

    def __init__(
        self,
        desc: str,
        total: int,
        done: int = 0,
        enabled: bool = True,
        *,
        unit: str = "step",
        first: float | None = None,
        every: float | None = None,
        position: int | None = None,
        leave: bool = True,
    ):
        self.desc, self.total, self.done, self.unit = desc, total, done, unit
        self.first = FIRST_LINE_AFTER if first is None else first
        self.every = PROGRESS_EVERY if every is None else every
        self.as_lines = enabled and not sys.stderr.isatty()
        self.bar = None
        if enabled and not self.as_lines:
            self.bar = tqdm(
                total=total,
                initial=done,
                desc=desc,
                unit=unit,
                position=position,
                leave=leave,
                dynamic_ncols=True,
                mininterval=0.5,
            )
        self.start = self.last_update = self.last_line = time.perf_counter()
        self.paced: tuple[float, int] | None = None  # (seconds, items) timed since the first move
        self.eta_shown = False
        self.postfix = ""

    def __enter__(self) -> StepProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, done: int, postfix: dict | str | None = None, timed: bool = True) -> None:
        """The count is `done` (`timed`: the time since the last update counts in the pace)."""
        now = time.perf_counter()
        interval = (now - self.last_update, done - self.done)
        self.last_update, self.done = now, done
        if isinstance(postfix, dict):
            postfix = ", ".join(f"{key} {value}" for key, value in postfix.items())
        self.postfix = self.postfix if postfix is None else postfix
        if self.paced is None and interval[1] > 0:  # the first move
            self.paced = (0.0, 0)
            self._restart_bar_clock()
        elif self.paced is not None and timed:
            self.paced = (self.paced[0] + interval[0], self.paced[1] + interval[1])
        if self.bar is not None:
            self.bar.update(max(0, done - self.bar.n))
            if postfix is not None:
                self.bar.set_postfix_str(postfix, refresh=False)
        if self.as_lines and self._line_due(now):
            self.last_line, self.eta_shown = now, self.paced is not None and self.paced[1] > 0
            print(self.line(now), file=sys.stderr, flush=True)

    def _line_due(self, now: float) -> bool:
        if now - self.last_line >= self.every:
            return True
        return not self.eta_shown and self.paced is not None and self.paced[1] > 0 and self.paced[0] >= self.first

    def line(self, now: float) -> str:
        """`desc: step S/N (P%), elapsed, ETA; postfix` (the ETA once the pace is measured)."""
        percent = 100 * self.done // self.total if self.total else 100
        times = elapsed_and_eta(now - self.start, self.paced, self.total - self.done)
        text = f"{self.desc}: {self.unit} {self.done}/{self.total} ({percent}%), {times}"
        return f"{text}; {self.postfix}" if self.postfix else text

    def _restart_bar_clock(self) -> None:
        """The bar's rate and ETA from here on, not from the first move's jump."""
        if self.bar is not None:
            self.bar.reset(total=self.total)
            self.bar.initial = self.bar.n = self.bar.last_print_n = self.done
            self.bar.refresh()

    def close(self, outcome: str | None = None) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.as_lines and outcome:
            print(f"{self.desc}: {outcome}", file=sys.stderr, flush=True)


class Stages:
    """The progress of `analyze` (or the command named by `prefix`) on stderr; nothing when not
    `enabled`. A context manager: a background thread keeps the lines coming until exit.

    `stage(name)` prints `analyze: NAME (12s elapsed)` as a stage starts; `stage(name, of=(i, n))`
    starts item i + 1 of n (a model of several) and adds the ETA of the n - i items left at the pace
    of the i done (`analyze: model 2/3: NAME (1m05s elapsed, ETA 1m05s)`); `stage.counter(what,
    total)` returns a `tick()` to call after each of the stage's `total` items, counted by a
    `StepProgress` (a bar on a terminal; in a log `analyze: WHAT 3/9 (33%), 1m05s elapsed, ETA
    2m10s`). Its lines come `every` seconds (PROGRESS_EVERY by default) after the counter starts and
    after each other, also while an item takes long; a stage without a counter repeats its line
    every `every` seconds. A log gets one line per stage, and one every 30 s in a longer stage.
    """

    def __init__(self, enabled: bool, every: float | None = None, prefix: str = "analyze"):
        self.enabled, self.every, self.prefix = enabled, PROGRESS_EVERY if every is None else every, prefix
        self.start = self.last_line = time.perf_counter()
        self.name, self.counted = "", None
        self.items: tuple[float, int, int] | None = None  # (start of the first item, items done, total)
        self.lock, self.stopped = threading.Lock(), threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True, name=f"{prefix}-progress")

    def __enter__(self) -> Stages:
        if self.enabled and not sys.stderr.isatty():
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join()
        self._close_counter()

    def __call__(self, name: str, of: tuple[int, int] | None = None) -> None:
        with self.lock:
            self._close_counter()
            if of is None:
                self.items = None
            else:
                done, total = of
                first = time.perf_counter() if done == 0 or self.items is None else self.items[0]
                self.items = (first, done, total)
            self.name = name
            self._print(self._heading())

    def counter(self, what: str, total: int):
        """Start counting `total` items of the current stage; returns `tick()` (one item done)."""
        with self.lock:
            self._close_counter()
            self.counted = StepProgress(
                self.prefix, total, 0, self.enabled, unit=what, first=self.every, every=self.every, leave=False
            )
        return self._tick

    def _tick(self) -> None:
        with self.lock:
            self.counted.update(self.counted.done + 1)

    def _beat(self) -> None:
        while not self.stopped.wait(min(1.0, max(0.01, self.every / 2))):
            with self.lock:
                if self.counted is not None:
                    self.counted.update(self.counted.done)  # a line when one is due
                elif self.name and time.perf_counter() - self.last_line >= self.every:
                    self._print(self._heading())

    def _heading(self) -> str:
        """`NAME (12s elapsed)`: the current stage and the time since the start, and in an item of
        several (`of`) the ETA of the items left."""
        now = time.perf_counter()
        if self.items is None:
            return f"{self.name} ({duration(now - self.start)} elapsed)"
        first, done, total = self.items
        return f"{self.name} ({elapsed_and_eta(now - self.start, (now - first, done), total - done)})"

    def _print(self, text: str) -> None:
        if self.enabled:
            print(f"{self.prefix}: {text}", file=sys.stderr, flush=True)
            self.last_line = time.perf_counter()

    def _close_counter(self) -> None:
        if self.counted is not None:
            self.counted.close()
            self.counted = None
