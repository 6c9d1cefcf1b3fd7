"""torchrun + FSDP2: one code path for one process, CPU ranks (gloo) and GPU ranks (nccl).

Under torchrun (WORLD_SIZE > 1) every trainable block of the drafter (fc, the projections,
norms and MLP of the midlayer, norm, lm_head) is sharded with
`torch.distributed.fsdp.fully_shard` (the frozen target embedding stays whole on each rank),
every rank takes its slice of the global batch (`rank::world`), and the loss of each rank is
its sum of CE divided by the GLOBAL count of counted positions, times world size (FSDP2
averages gradients over ranks), so the update equals one process on the whole batch.
The backend follows the device: nccl for CUDA, gloo otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    device: str = "cpu"

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup(device: str) -> Dist:
    """Join the torchrun process group when there is one; pick this rank's device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist(0, 1, device)
    import torch.distributed as dist

    cuda = device.startswith("cuda")
    if cuda:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    return Dist(dist.get_rank(), dist.get_world_size(), device)


def barrier(d: Dist) -> None:
    """Wait for every rank (no-op for one process). Called before a clean teardown: a gloo
    rank that destroys the group while its peer still has work in flight can abort the peer
    ("terminate called without an active exception")."""
    if d.enabled:
        import torch.distributed as dist

        dist.barrier()


def teardown(d: Dist) -> None:
    if d.enabled:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


# Modules whose forward receives the DraftCache. FSDP2's pre-forward copies dataclass
# arguments under autograd, so an appended K/V would land in a copy: these stay unsharded and
# their children (projections, norms, MLP: plain tensor in, tensor out) are the FSDP units.
_CACHE_CARRIERS = ("", "midlayer", "midlayer.self_attn")


def shard(drafter: torch.nn.Module, d: Dist) -> torch.nn.Module:
    """FSDP2 over every trainable block (no-op for one process); the frozen embedding stays
    whole."""
    if not d.enabled:
        return drafter
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(torch.device(d.device).type, (d.world,))
    covered: set[str] = set()
    for parent in _CACHE_CARRIERS:
        owner = drafter.get_submodule(parent)
        for name, child in owner.named_children():
            full_name = f"{parent}.{name}" if parent else name
            trainable = [n for n, p in child.named_parameters() if p.requires_grad]
            if full_name in _CACHE_CARRIERS or not trainable:
                continue
            fully_shard(child, mesh=mesh)
            covered |= {f"{full_name}.{n}" for n in trainable}
    missed = [n for n, p in drafter.named_parameters() if p.requires_grad and n not in covered]
    if missed:
        raise RuntimeError(f"FSDP: trainable parameters outside any shard: {missed}")
    return drafter


def all_sum(t: torch.Tensor, d: Dist) -> torch.Tensor:
    """Sum of `t` over ranks (a copy; float64 sums travel as they are)."""
    if not d.enabled:
        return t
    import torch.distributed as dist

    t = t.clone().to(d.device)
    dist.all_reduce(t)
    return t


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a (possibly sharded DTensor) parameter or state entry."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def like(full_t: torch.Tensor, ref: Any) -> torch.Tensor:
    """`full_t` laid out like `ref` (sharded the same way when `ref` is a DTensor)."""
    if hasattr(ref, "device_mesh"):
        from torch.distributed.tensor import distribute_tensor

        return distribute_tensor(full_t.to(ref.dtype), ref.device_mesh, ref.placements)
    return full_t.to(device=ref.device, dtype=ref.dtype)


def trainable(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Canonical tensors, whole, on CPU (every rank must call it: it gathers shards)."""
    out = {}
    for n, t in model.state_dict().items():
        out[n] = full(t).detach().cpu()
    return out


def load_model_state(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for n, t in model.state_dict().items():
            if n in tensors:
                t.copy_(like(tensors[n], t))


def optim_state(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, dict[str, Any]]:
    """{param name: {"step", "exp_avg", "exp_avg_sq"}} whole, on CPU (collective)."""
    out = {}
    for n, p in trainable(model).items():
        st = opt.state.get(p)
        if st:
            out[n] = {k: full(v).detach().cpu() if torch.is_tensor(v) else v for k, v in st.items()}
    return out


def load_optim_state(
    model: torch.nn.Module, opt: torch.optim.Optimizer, state: dict[str, dict[str, torch.Tensor]]
) -> None:
    for n, p in trainable(model).items():
        if n not in state:
            continue
        st = {}
        for k, v in state[n].items():
            st[k] = v.clone() if k == "step" else like(v, p.detach())
        opt.state[p] = st
