"""The signals that stop a training session: SIGINT and SIGTERM ask the loop to stop after the
current step with a checkpoint (a second one aborts at once), and SWEEP_ENDED tells a training that
the `hyla sweep` which started it has ended."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

from tqdm.auto import tqdm

SWEEP_ENDED = getattr(signal, "SIGUSR1", None)
"""The signal a training started by `hyla sweep` gets when the sweep ends, however it ends (on Linux:
the parent-death signal, hyla.runs.launch.end_with_parent): a stop request like SIGTERM's,
except that repeats of it are the same request (a dying sweep sends one per thread), never an abort."""


class Stopped(KeyboardInterrupt):
    """A session stopped by a signal; `hyla` exits with 128 + its number (SIGINT 130, SIGTERM 143)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


class StopSignal:
    """SIGINT / SIGTERM (and SWEEP_ENDED) ask the loop to stop after the current step (it checkpoints
    first); a second SIGINT / SIGTERM interrupts at once (the run then resumes from its last checkpoint)."""

    def __init__(self):
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def stopped(self) -> Stopped:
        """The exception that ends the session (another rank's stop: SIGTERM's)."""
        return Stopped(self.signum or signal.SIGTERM)

    def _handle(self, signum, frame):
        if signum == SWEEP_ENDED and self.requested:
            return
        if self.requested:
            raise Stopped(signum)
        self.signum = signum
        why = " (the sweep that started this training ended)" if signum == SWEEP_ENDED else ""
        tqdm.write(
            f"{signal.Signals(signum).name}{why}: stopping after this step with a checkpoint "
            "(send SIGINT or SIGTERM again to abort at once)"
        )

    @contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        signals = [signal.SIGINT, signal.SIGTERM] + ([SWEEP_ENDED] if SWEEP_ENDED else [])
        previous = {sig: signal.signal(sig, self._handle) for sig in signals}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
