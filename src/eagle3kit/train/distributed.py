"""torchrun + FSDP2: one code path for one process, CPU ranks (gloo) and GPU ranks (nccl).

Under torchrun (WORLD_SIZE > 1) every trainable block of the drafter (fc, the projections,
norms and MLP of the midlayer, norm, lm_head) is sharded with
`torch.distributed.fsdp.fully_shard` (the frozen target embedding stays whole on each rank; a
trainable tensor outside every block, P-EAGLE's `mask_hidden`, is replicated, its gradient
averaged by `sync_replicated`),
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
# A drafter names its own (`cache_carriers`: a P-EAGLE drafter's later layers too).
_CACHE_CARRIERS = ("", "midlayer", "midlayer.self_attn")


def shard(
    drafter: torch.nn.Module, d: Dist, carriers: tuple[str, ...] | None = None
) -> torch.nn.Module:
    """FSDP2 over every trainable block (no-op for one process); the frozen embedding stays
    whole. The units are the children of `carriers` (the items of a ModuleList child each
    one); a trainable tensor a carrier holds itself (P-EAGLE's `mask_hidden`, read outside
    any unit's forward) becomes a replicated DTensor whose gradient `sync_replicated` averages
    over ranks after the backward, as FSDP2 averages the sharded ones."""
    if not d.enabled:
        return drafter
    carriers = carriers or getattr(drafter, "cache_carriers", _CACHE_CARRIERS)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(torch.device(d.device).type, (d.world,))
    covered: set[str] = set()
    for full_name, unit in _units(drafter, carriers):
        fully_shard(unit, mesh=mesh)
        covered |= {f"{full_name}.{n}" for n, p in unit.named_parameters() if p.requires_grad}
    for parent in carriers:
        owner = drafter.get_submodule(parent)
        for name, p in list(owner.named_parameters(recurse=False)):
            if p.requires_grad:
                _replicate(owner, name, p, mesh)
                covered.add(f"{parent}.{name}" if parent else name)
    missed = [n for n, p in drafter.named_parameters() if p.requires_grad and n not in covered]
    if missed:
        raise RuntimeError(f"FSDP: trainable parameters outside any shard: {missed}")
    return drafter


def _units(drafter: torch.nn.Module, carriers: tuple[str, ...]):
    """(name, module) of every FSDP unit: the trainable children of the carriers that are
    not carriers themselves, a ModuleList replaced by its items (it has no forward)."""
    for parent in carriers:
        for name, child in drafter.get_submodule(parent).named_children():
            full_name = f"{parent}.{name}" if parent else name
            if full_name in carriers:
                continue
            items = (
                [(f"{full_name}.{i}", c) for i, c in enumerate(child)]
                if isinstance(child, torch.nn.ModuleList)
                else [(full_name, child)]
            )
            for n, c in items:
                if any(p.requires_grad for p in c.parameters()):
                    yield n, c


def _replicate(owner: torch.nn.Module, name: str, p: torch.nn.Parameter, mesh: Any) -> None:
    from torch.distributed.tensor import Replicate, distribute_tensor

    rep = distribute_tensor(p.detach(), mesh, [Replicate()])
    setattr(owner, name, torch.nn.Parameter(rep, requires_grad=True))


def _replicated(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    out = []
    for p in model.parameters():
        places = getattr(p, "placements", None)
        if p.requires_grad and places and all(x.is_replicate() for x in places):
            out.append(p)
    return out


def sync_replicated(model: torch.nn.Module, d: Dist) -> None:
    """Average the gradients of the replicated parameters over ranks (each rank's is its own
    slice's until then); every rank calls it after the backward, in the same order."""
    if not d.enabled:
        return
    import torch.distributed as dist

    for p in _replicated(model):
        if p.grad is not None:
            g = p.grad.to_local()
            dist.all_reduce(g)
            g.div_(d.world)


def row_generators(seed: int, step: int, rows: range | list[int]) -> list[torch.Generator]:
    """One CPU generator per row of a step's global batch (positions `rows` in it), seeded by
    (seed, step, position): a rank draws for its rows what one process draws for them, and a
    resumed run draws what the uninterrupted one did."""
    base = (seed * 1_000_003 + step) * 4_099
    return [torch.Generator().manual_seed(base + j) for j in rows]


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
