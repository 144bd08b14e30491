"""The fault programs of tests/test_reliability.py, now in ``lens.testing`` (shared with benchmarks/reliability.py,
which may not import tests/); kept so the tests' imports stay as they are."""

from lens.testing import (DISK_FULL_SAVE, HOLD_LOCK, KILL_BETWEEN_RENAMES, MAKE_INDEX, SAVE_LOOP,  # noqa: F401
                          SLOW_BUILD, make_index)
