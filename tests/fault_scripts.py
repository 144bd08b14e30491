"""Python programs that play a fault in a second process, run as ``python -c SCRIPT ARGS...`` by
tests/test_reliability.py and by benchmarks/reliability.py (the reliability table), so both try the same faults.

``MAKE_INDEX`` is the prelude of the index scripts: ``make(prefix, n, seed)``, a small random ``HybridIndex`` of ids
``{prefix}0`` .. (index only, no torch, so the process starts fast); :func:`make_index` is the same function in the
calling process, to build what a script saved and compare.
"""

from __future__ import annotations

MAKE_INDEX = """
import numpy as np
from index import HybridIndex

def make(prefix, n, seed):
    rng = np.random.default_rng(seed)
    lex = np.abs(rng.standard_normal((n, 24))).astype(np.float32)
    index = HybridIndex(24, 8, weights=(0.6, 0.4))
    index.add([f"{prefix}{i}" for i in range(n)], lex, rng.standard_normal((n, 8)).astype(np.float32),
              metadata=[{"i": i} for i in range(n)])
    return index
"""
_namespace: dict = {}
exec(MAKE_INDEX, _namespace)
make_index = _namespace["make"]

# ARGS: directory, what it is ("index", "model directory"), a file to create once the writer lock is held.
# Holds the lock until its stdin is closed.
HOLD_LOCK = """
import sys
from pathlib import Path
from lens.atomic import DirectoryLock
with DirectoryLock(sys.argv[1], sys.argv[2]):
    Path(sys.argv[3]).touch()
    sys.stdin.read()  # until the caller closes our stdin
"""

# ARGS: started file, go file, then the arguments of `lens`. Runs `lens ARGS`, whose first chunk to encode touches
# the started file and waits for the go file (at most 240 s).
SLOW_BUILD = """
import sys, time
from pathlib import Path
import lens.indexing as indexing

real, started, go = indexing.encode_chunk, Path(sys.argv[1]), Path(sys.argv[2])

def slow(*args):
    started.touch()
    deadline = time.time() + 240
    while not go.exists() and time.time() < deadline:
        time.sleep(0.05)
    return real(*args)

indexing.encode_chunk = slow
from lens.cli import main
sys.exit(main(sys.argv[3:]))
"""

# ARGS: target, seconds. Saves make("a", 300, 0) and make("b", 200, 1) to the target in turn for that long;
# prints "ready" after the first save, then the number of saves.
SAVE_LOOP = MAKE_INDEX + """
import sys, time
target, seconds = sys.argv[1], float(sys.argv[2])
versions = [make("a", 300, 0), make("b", 200, 1)]
versions[0].save(target)
print("ready", flush=True)
n, t0 = 0, time.time()
while time.time() - t0 < seconds:
    versions[n % 2].save(target)
    n += 1
print(n, flush=True)
"""

# ARGS: target. Saves make("a", 300, 0), then dies (SIGKILL) between the two renames of saving make("b", 200, 1).
KILL_BETWEEN_RENAMES = MAKE_INDEX + """
import os, signal, sys
import lens.atomic.writes
make("a", 300, 0).save(sys.argv[1])
lens.atomic.writes.between_renames_hook = lambda old, new: os.kill(os.getpid(), signal.SIGKILL)
make("b", 200, 1).save(sys.argv[1])
"""

# ARGS: target, a file-size limit in bytes. Saves make("a", 20, 0), then make("b", 3000, 1) under the limit; prints
# the error's type and errno on one line, its message on the next.
DISK_FULL_SAVE = MAKE_INDEX + """
import resource, signal, sys
make("a", 20, 0).save(sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so that writing past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
try:
    make("b", 3000, 1).save(sys.argv[1])
except Exception as e:
    print(type(e).__name__, getattr(e, "errno", None))
    print(e)
"""
