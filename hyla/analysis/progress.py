"""Progress lines of a long analysis (`analyze`, `interventions`) on stderr: tqdm bars on a terminal;
elsewhere (a log file, `tail -f`) plain lines: one as each stage starts, and one with the ETA every
30 seconds."""

from __future__ import annotations

import sys
import threading
import time

from hyla.utils import duration, elapsed_and_eta

PROGRESS_EVERY = 30.0  # seconds between progress lines outside a terminal


class Stages:
    """Progress of `analyze` (or the command named by `prefix`) on stderr; nothing when not `enabled`.

    `stage(name)` prints `analyze: NAME (12 s elapsed)` as a stage starts; `stage.counter(what,
    total)` returns a `tick()` to call after each of the stage's `total` items. On a terminal the
    items advance a tqdm bar; elsewhere (a log file) a background thread prints
    `analyze: WHAT 3/9 (1 min 05 s elapsed, ETA 2 min 10 s)` whenever no line was printed for `every`
    seconds (30 by default), so a log gets one line per stage and an ETA line every 30 s: the ETA is
    the stage's measured pace (its time so far per item done) times the items left. Use as a
    context manager: the thread stops on exit.
    """

    def __init__(self, enabled: bool, every: float | None = None, prefix: str = "analyze"):
        self.enabled, self.every, self.prefix = enabled, PROGRESS_EVERY if every is None else every, prefix
        self.bars = enabled and sys.stderr.isatty()
        self.start = self.last_line = time.perf_counter()
        self.name, self.what, self.total, self.done, self.since, self.bar = "", "", 0, 0, self.start, None
        self.lock, self.stopped = threading.Lock(), threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True, name=f"{prefix}-progress")

    def __enter__(self) -> Stages:
        if self.enabled and not self.bars:
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join()
        self._close_bar()

    def __call__(self, name: str) -> None:
        with self.lock:
            self._close_bar()
            self.name, self.what, self.total, self.done = name, name, 0, 0
            self._print(f"{name} ({duration(time.perf_counter() - self.start)} elapsed)")

    def counter(self, what: str, total: int):
        """Start counting `total` items of the current stage; returns `tick()` (one item done)."""
        with self.lock:
            self._close_bar()
            self.what, self.total, self.done, self.since = what, total, 0, time.perf_counter()
            if self.bars:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=total, desc=what, leave=False, dynamic_ncols=True)
        return self._tick

    def _tick(self) -> None:
        with self.lock:
            self.done += 1
            if self.bar is not None:
                self.bar.update(1)

    def status(self) -> str:
        """`WHAT i/N (elapsed, ETA)` while counting, else `NAME (elapsed)`."""
        now = time.perf_counter()
        if not self.total:
            return f"{self.name} ({duration(now - self.start)} elapsed)"
        paced = (now - self.since, self.done) if self.done < self.total else None
        times = elapsed_and_eta(now - self.start, paced, self.total - self.done)
        return f"{self.what} {self.done}/{self.total} ({times})"

    def _beat(self) -> None:
        while not self.stopped.wait(min(1.0, max(0.01, self.every / 2))):
            with self.lock:
                if self.name and time.perf_counter() - self.last_line >= self.every:
                    self._print(self.status())

    def _print(self, text: str) -> None:
        if self.enabled:
            print(f"{self.prefix}: {text}", file=sys.stderr, flush=True)
            self.last_line = time.perf_counter()

    def _close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
