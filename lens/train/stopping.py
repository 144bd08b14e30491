"""Ending a training run early and cleanly, so that ``--resume`` continues it: a time limit, and SIGTERM.

Batch schedulers end jobs at a known time (SLURM's ``--time``, a lease of fixed length) or send SIGTERM a little
before SIGKILL (SLURM, Kubernetes, preemptible cloud machines; torchrun forwards it to its workers). A loop that
is simply killed loses every step since its last checkpoint. With a ``StopRule`` the loop (``Trainer.train``,
``MNTPWarmup.run``) asks after each step whether to stop there: when SIGTERM has arrived, or when the next step
would not end, with its checkpoint written, inside the time limit (judged by the slowest of the recent steps and
the last checkpoint's writing time). It then writes the checkpoint and raises ``TrainingStopped``; the command
exits with ``EXIT_RESUMABLE`` and the same command with ``--resume`` takes exactly the steps an uninterrupted run
would. Distributed, the ranks agree (one all-reduce of a flag per step), so every rank stops at the same step.

A second SIGTERM is not held back: the handler steps aside after the first, so the next one acts as before.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from collections import deque
from typing import Callable

logger = logging.getLogger(__name__)

# sysexits.h's EX_TEMPFAIL ("temporary failure; the user is invited to retry"): stopped with a checkpoint, not
# failed. A wrapper loops on it: `until lens train ... --resume; [ $? -ne 75 ]; do :; done` style.
EXIT_RESUMABLE = 75

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([smh]?)\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in a duration such as ``90s``, ``9m``, ``1.5h`` or ``HH:MM:SS``; a bare number is minutes (as
    SLURM's ``--time``)."""
    value = str(text).strip()
    if ":" in value:
        parts = value.split(":")
        if len(parts) == 3 and all(p.strip().isdigit() for p in parts):
            h, m, s = (int(p) for p in parts)
            seconds = float(h * 3600 + m * 60 + s)
            if seconds > 0:
                return seconds
    else:
        match = _DURATION.match(value)
        if match and float(match.group(1)) > 0:
            return float(match.group(1)) * _UNIT_SECONDS[(match.group(2) or "m").lower()]
    raise ValueError(f"time limit {text!r} is not a positive duration: give e.g. 90s, 9m, 1.5h or HH:MM:SS "
                     "(a bare number is minutes)")


def format_duration(seconds: float) -> str:
    """``seconds`` the way a person reads a limit: ``540 s``, ``9.0 min``, ``1.50 h``."""
    if seconds < 10:
        return f"{seconds:.3g} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


class TrainingStopped(Exception):
    """A loop stopped before its last step, its checkpoint written: the same command with ``--resume`` continues."""

    def __init__(self, step: int, total: int, reason: str, checkpoint) -> None:
        self.step, self.total, self.reason, self.checkpoint = step, total, reason, checkpoint
        super().__init__(f"stopped at step {step} of {total} ({reason}); the checkpoint is in {checkpoint}: run "
                         "the same command with --resume to continue")


class StopRule:
    """When a loop should stop early: after SIGTERM, or before a step that would overrun ``time_limit`` seconds.

    ``start`` is when the limit began (default: now, on the ``clock``); pass the command's own start so the
    limit covers loading and caching too. Use it as a context manager around the loop: inside, SIGTERM sets a
    flag instead of ending the process (in the main thread only; elsewhere the signal acts as before).
    """

    def __init__(self, time_limit: float | None = None, *, sigterm: bool = True, start: float | None = None,
                 clock: Callable[[], float] = time.monotonic, window: int = 10) -> None:
        if time_limit is not None and not time_limit > 0:
            raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit}")
        self.time_limit = time_limit
        self.sigterm = sigterm
        self.clock = clock
        self.start = clock() if start is None else start
        self._steps: deque[float] = deque(maxlen=window)  # the recent steps' durations (checkpoints included)
        self._last: float | None = None
        self._checkpoint_s = 0.0
        self.signalled: str | None = None
        self._previous = None

    def __enter__(self) -> "StopRule":
        if self.sigterm and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_signal)
        self._last = self.clock()
        return self

    def __exit__(self, *exc) -> bool:
        self._restore()
        return False

    def _restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _on_signal(self, signum, frame) -> None:
        self.signalled = signal.Signals(signum).name
        self._restore()  # a second SIGTERM acts as it did before this rule
        logger.warning("%s received: stopping after this step, with a checkpoint (send it again to stop at once)",
                       self.signalled)

    def after_step(self, step: int, total: int, checkpoint_due: bool, write_checkpoint: Callable[[], None],
                   where, dist=None) -> None:
        """A loop's end of step ``step`` of ``total`` (every rank calls it): writes the checkpoint when one is due
        (timed, for ``due``), and when the run should stop here writes it if it was not due and raises
        ``TrainingStopped`` naming ``where`` (the checkpoint's path)."""
        if checkpoint_due:
            self._write(write_checkpoint)
        if step >= total:
            return
        reason = self.due(dist)
        if reason:
            if not checkpoint_due:
                self._write(write_checkpoint)
            raise TrainingStopped(step, total, reason, where)

    def _write(self, write_checkpoint: Callable[[], None]) -> None:
        t = self.clock()
        write_checkpoint()
        self.checkpoint_written(self.clock() - t)

    def checkpoint_written(self, seconds: float) -> None:
        """How long the loop's last checkpoint took to write: the time a stop must leave for its own."""
        self._checkpoint_s = seconds

    def _reason(self) -> str | None:
        if self.signalled:
            return self.signalled
        if self.time_limit is None:
            return None
        now = self.clock()
        slowest = max(self._steps, default=0.0)
        if now - self.start + slowest + max(self._checkpoint_s, slowest) > self.time_limit:
            return f"time limit {format_duration(self.time_limit)}"
        return None

    def due(self, dist=None) -> str | None:
        """Call after each step: the reason to stop now, or None to go on. Distributed (``dist`` enabled), every
        rank must call it at every step; all get a reason when any rank has one."""
        now = self.clock()
        if self._last is not None:
            self._steps.append(now - self._last)
        self._last = now
        reason = self._reason()
        if dist is not None and dist.enabled:
            from lens.train.distributed import any_rank

            if any_rank(reason is not None, dist) and reason is None:
                reason = "another rank stopped"
        return reason
