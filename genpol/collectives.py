"""The collectives of a run over N processes, torch only: what learners and loops call to agree.

With one process (no initialized process group) each of them returns its input unchanged (and
``broadcast_modules`` does nothing), so the learners call them unconditionally. Launching (torchrun
detection, seeds per rank) and the per-rank state of checkpoints live in ``genpol.distributed``, above
the loops; this module sits with the networks, so the losses and updaters below the loops can average
gradients without importing them.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn


def world_size() -> int:
    """Processes in this run (1 without an initialized process group)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if world_size() > 1 else 0


def is_main() -> bool:
    """Whether this process does the run's I/O (rank 0, or the only process)."""
    return rank() == 0


def average_gradients(params: list[nn.Parameter], stats: dict[str, torch.Tensor] | None = None
                      ) -> dict[str, torch.Tensor]:
    """Replace every ``p.grad`` by its mean over ranks, and ``stats`` (scalar tensors) by theirs, in
    one all-reduce of one flat buffer. A parameter that no rank has a gradient for keeps None; one
    with a gradient on some ranks only gets the mean with zeros for the others (their loss did not
    depend on it), so every rank steps the same parameters."""
    stats = stats or {}
    if world_size() == 1:
        return {key: value.detach() for key, value in stats.items()}
    reference = params[0]
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    present = torch.tensor([float(p.grad is not None) for p in params], device=reference.device)
    flat = torch.cat([g.reshape(-1).to(reference.dtype) for g in grads]
                     + [present] + [value.detach().reshape(-1).to(reference.device, reference.dtype)
                                    for value in stats.values()])
    dist.all_reduce(flat)
    flat /= world_size()
    grads_size = sum(g.numel() for g in grads)
    somewhere = flat[grads_size:grads_size + len(params)] > 0
    offset = 0
    for index, (p, g) in enumerate(zip(params, grads)):
        mean = flat[offset:offset + g.numel()].view_as(g)
        offset += g.numel()
        if p.grad is not None:
            p.grad.copy_(mean)
        elif somewhere[index]:
            p.grad = mean.clone()
    offset += len(params)
    averaged = {}
    for key, value in stats.items():
        averaged[key] = flat[offset:offset + value.numel()].view_as(value).to(value.dtype)
        offset += value.numel()
    return averaged


def average_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The mean of ``tensor`` over ranks (a new tensor; ``tensor`` itself when there is one rank)."""
    if world_size() == 1:
        return tensor
    out = tensor.detach().clone()
    dist.all_reduce(out)
    return out / world_size()


def average_floats(*values: float) -> list[float]:
    """The means over ranks of a few floats, in one all-reduce (unchanged with one rank)."""
    if world_size() == 1:
        return list(values)
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    return average_tensor(torch.tensor(values, dtype=torch.float64, device=device)).tolist()


def sum_int(value: int) -> int:
    """The sum of ``value`` over ranks (env steps of one iteration)."""
    if world_size() == 1:
        return value
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    total = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(total)
    return int(total)


def any_rank(flag: bool) -> bool:
    """True on every rank when ``flag`` is true on any (a stop signal that reached one process)."""
    return sum_int(int(flag)) > 0


def all_episodes(*statistics: list) -> tuple[list, ...]:
    """Every rank's finished-episode statistics (e.g. returns, lengths, successes), each list
    concatenated in rank order, on every rank."""
    if world_size() == 1:
        return tuple(list(part) for part in statistics)
    everyone: list[Any] = [None] * world_size()
    dist.all_gather_object(everyone, statistics)
    return tuple([value for part in everyone for value in part[k]] for k in range(len(statistics)))


def broadcast_object(value: Any) -> Any:
    """Rank 0's ``value`` (picklable) on every rank."""
    if world_size() == 1:
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def broadcast_modules(modules: dict[str, nn.Module | torch.Tensor]) -> None:
    """Copy rank 0's parameters and buffers into every rank's modules, in one flattened broadcast."""
    if world_size() == 1:
        return
    tensors: list[torch.Tensor] = []
    for module in modules.values():
        if isinstance(module, torch.Tensor):
            tensors.append(module)
        else:
            tensors += [*module.parameters(), *module.buffers()]
    floating = [t for t in tensors if t.is_floating_point()]
    if not floating:
        return
    flat = torch.cat([t.detach().reshape(-1).to(floating[0].dtype) for t in floating])
    dist.broadcast(flat, src=0)
    offset = 0
    with torch.no_grad():
        for t in floating:
            t.copy_(flat[offset:offset + t.numel()].view_as(t))
            offset += t.numel()


def normalize_advantages(advantages: torch.Tensor, std: str = "unbiased") -> torch.Tensor:
    """``(A - mean) / (std + 1e-8)`` with the mean and the ``unbiased`` (n - 1) or ``population`` (n) std
    of all ranks' advantages ``[N]`` together (equal to ``losses.normalize_advantages`` on the
    concatenated batch)."""
    local = advantages.detach().to(torch.float64)
    moments = torch.stack([local.new_tensor(float(local.numel())), local.sum(), local.square().sum()])
    if world_size() > 1:
        dist.all_reduce(moments)
    count, total, squares = moments.tolist()
    mean = total / count
    dof = count - 1 if std == "unbiased" else count
    if dof <= 0:  # one sample in all: no unbiased std, returned as it is (losses.normalize_advantages does so too)
        return advantages
    std = max((squares - count * mean * mean) / dof, 0.0) ** 0.5
    return (advantages - mean) / (std + 1e-8)
