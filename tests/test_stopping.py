"""Stopping a run early and cleanly: durations parse, the time limit stops before the step that would overrun it,
SIGTERM is caught once and then given back, and the ranks agree."""

import os
import signal

import pytest

from lens.train.distributed import DistributedContext, any_rank
from lens.train.stopping import EXIT_RESUMABLE, StopRule, TrainingStopped, parse_duration


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("9m", 540), ("9", 540), ("1.5h", 5400), ("0.5", 30),
                                           ("00:09:30", 570), (" 2H ", 7200), ("0.001s", 0.001)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["0", "-1m", "abc", "9 minutes", "1:30", "00:00:00", "", "1e3"])
def test_parse_duration_rejects_what_is_not_a_positive_duration(text):
    with pytest.raises(ValueError, match="not a positive duration.*9m"):
        parse_duration(text)


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_time_limit_stops_before_the_step_that_would_overrun():
    clock = Clock()
    stops = []
    with StopRule(45, start=0.0, clock=clock, sigterm=False) as rule:
        for step in range(1, 10):
            clock.t += 10  # each step takes 10 s; a checkpoint is not timed yet, so it is taken to cost a step
            reason = rule.due()
            stops.append(reason)
            if reason:
                break
    # after step 3 (t=30) the next step and its checkpoint would end at 50 > 45; after step 2 at 40 <= 45
    assert stops[:2] == [None, None] and stops[2] == "time limit 45 s" and len(stops) == 3


def test_a_slow_checkpoint_stops_earlier():
    clock = Clock()
    with StopRule(45, start=0.0, clock=clock, sigterm=False) as rule:
        clock.t += 10
        rule.checkpoint_written(20.0)
        assert rule.due() is None  # 10 s gone + a 10 s step + a 20 s checkpoint = 40 <= 45
        clock.t += 10
        assert rule.due() == "time limit 45 s"  # 20 + 10 + 20 = 50: one step before a 10 s checkpoint would stop


def test_without_a_limit_or_a_signal_it_never_stops():
    clock = Clock()
    with StopRule(None, clock=clock, sigterm=False) as rule:
        for _ in range(100):
            clock.t += 1e6
            assert rule.due() is None


def test_time_limit_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        StopRule(0)


def test_sigterm_is_caught_once_then_given_back():
    calls = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    try:
        with StopRule(None) as rule:
            assert rule.due() is None
            os.kill(os.getpid(), signal.SIGTERM)
            assert rule.due() == "SIGTERM" and calls == []  # caught: the process goes on to its checkpoint
            os.kill(os.getpid(), signal.SIGTERM)  # a second one reaches the handler that was there before
            assert calls == [signal.SIGTERM]
        os.kill(os.getpid(), signal.SIGTERM)
        assert calls == [signal.SIGTERM] * 2  # and after the rule the old handler is back
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_any_rank_in_one_process():
    ctx = DistributedContext()
    assert any_rank(True, ctx) is True and any_rank(False, ctx) is False


def test_training_stopped_says_how_to_continue(tmp_path):
    e = TrainingStopped(3, 10, "SIGTERM", tmp_path / "checkpoint")
    assert "stopped at step 3 of 10 (SIGTERM)" in str(e) and "--resume" in str(e) and str(tmp_path) in str(e)
    assert EXIT_RESUMABLE == 75


@pytest.mark.parametrize("outcome, waits, code", [("done", [True], 0), ("stopped", [True], 75),
                                                  ("failed", [False], None)])
def test_the_command_leaves_the_group_waiting_for_the_ranks_only_when_they_all_got_there(outcome, waits, code):
    """A finished or stopped run (every rank at the same step) waits for the others before leaving the process
    group; a failed one leaves without waiting (a peer may be inside a collective) and the error goes on."""
    from types import SimpleNamespace

    from lens.cli_train import _run_loop
    from lens.train.stopping import TrainingStopped

    closed = []
    loop = SimpleNamespace(dist=SimpleNamespace(is_main=True), close=lambda wait=True: closed.append(wait))

    def run():
        if outcome == "stopped":
            raise TrainingStopped(1, 3, "time limit", "ckpt")
        if outcome == "failed":
            raise RuntimeError("boom")
        return "out"

    if code is None:
        with pytest.raises(RuntimeError, match="boom"):
            _run_loop(loop, run, 0.0, lambda out, s: f"done {out}", "train")
    else:
        assert _run_loop(loop, run, 0.0, lambda out, s: f"done {out}", "train") == code
    assert closed == waits
