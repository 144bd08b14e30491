"""This host's processor, read once here (the one reader of ``/proc/cpuinfo``): what the int8 probe keys its cached
measurement by (``lens.quantize``) and what results and model cards name as the machine; and the memory a process
can be given now (``available_memory``: a released 7B checkpoint's load checks it).

Int8 kernels are picked by the instruction sets a CPU has (AVX2, AVX-512, VNNI, AMX), so quantized encodings, and the
scores they give, can differ between hosts; results say which CPU gave them.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

__all__ = ["available_memory", "cpu_info", "cpu_name", "int8_features"]

INT8_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_int8", "asimddp", "i8mm")


@functools.lru_cache(maxsize=1)  # the CPU does not change while a process runs
def cpu_info() -> tuple[str, str]:
    """This CPU's model name and its feature flags (sorted, space-separated), from /proc/cpuinfo where there is one;
    elsewhere the platform's own name for the processor and no flags."""
    model = flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                name, _, value = (part.strip() for part in line.partition(":"))
                if not model and name in ("model name", "Model", "cpu model", "Processor"):
                    model = value
                elif not flags and name in ("flags", "Features"):
                    flags = " ".join(sorted(value.split()))
                if model and flags:
                    break
    except OSError:  # not Linux
        pass
    return model or platform.processor() or platform.machine() or "unknown", flags


def cpu_name() -> str:
    """This CPU's model name (:func:`cpu_info`)."""
    return cpu_info()[0]


def int8_features(flags: str | None = None) -> list[str]:
    """Which of the instruction sets int8 kernels choose between this CPU has (of ``flags``, default this CPU's),
    in :data:`INT8_FEATURES` order."""
    have = set((cpu_info()[1] if flags is None else flags).split())
    return [f for f in INT8_FEATURES if f in have]


def available_memory() -> int | None:
    """Bytes of memory this process can be given now: Linux's MemAvailable, capped by the container's cgroup v2
    limit less what the group uses; None where neither is known."""
    found = []
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            found += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text().strip()))
    except (OSError, ValueError):
        pass
    return min(found) if found else None
