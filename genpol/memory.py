"""Memory checked before it is allocated: a buffer that a config sizes is refused, naming the key,
the bytes it needs and the bytes the device has, instead of failing in the allocator (or, for a
lazily touched CPU buffer, hours later when it fills).

"Available" is what the kernel can give without swapping (``MemAvailable`` in /proc/meminfo) on
CPU, and what the CUDA allocator reports free on a GPU. A platform without either is not checked.
"""

from __future__ import annotations

from pathlib import Path

import torch

from genpol.errors import ConfigError


def available_bytes(device: str | torch.device) -> int | None:
    """Bytes ``device`` can still give (None where this platform does not say)."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    meminfo = Path("/proc/meminfo")
    if device.type != "cpu" or not meminfo.exists():
        return None
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024  # the file counts kB
    return None


def human_bytes(count: float) -> str:
    """``1.5 GB``, ``320.0 MB``, ``4.4 TB``: decimal units, as the error messages print them."""
    if abs(count) < 1000:
        return f"{count:.0f} B"
    for unit in ("kB", "MB", "GB", "TB"):
        count /= 1000
        if abs(count) < 1000:
            return f"{count:.1f} {unit}"
    return f"{count / 1000:.1f} PB"


def require_memory(key: str, value: int, needed: int, device: str | torch.device, what: str) -> None:
    """Raise ``ConfigError`` when ``needed`` bytes (for ``what``, sized by ``key=value``) exceed what
    ``device`` has available."""
    available = available_bytes(device)
    if available is not None and needed > available:
        raise ConfigError(f"{key}={value} needs {human_bytes(needed)} for {what}, but {torch.device(device)} has "
                          f"{human_bytes(available)} available: lower {key}")


def check_device(device: str | torch.device) -> None:
    """``ConfigError`` naming ``device`` when torch cannot parse it or this machine lacks it (a CPU-only
    torch, or no such GPU): otherwise the first tensor moved there fails deep inside an env or a head."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"device must be a torch device such as cpu, cuda or cuda:1, got {device!r}") from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device={device}: this torch has no CUDA device to use (torch {torch.__version__}, "
                              f"CUDA build: {torch.version.cuda is not None}); use device=cpu")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise ConfigError(f"device={device}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                              f"numbered from 0")
    elif parsed.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device={device}: MPS is not available here; use device=cpu")
