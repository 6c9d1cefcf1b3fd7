"""Does a FastMTP-trained MTP head pay on a zoo DeepSeek member, and does a fine-tune raise it?

    python benchmarks/bench_mtp.py [--member dsv3-v2] [--size tiny|full] [--member-dir DIR]
        [--parent-dir DIR] [--ship-steps 200] [--tune-steps 100] [--samples 400]
        [--prompts 8] [--max-new-tokens 64] [--depth 3] [--work DIR]
        [--json benchmarks/results/mtp-tiny.json]

The K2 -> K2.5 story with MTP heads: the parent member (dsv3-v1) ships a head trained with
it (FastMTP from fresh weights, --ship-steps, on the parent's own chat data:
methods/mtp/train/zoo.add_mtp_layer's recipe); the child (dsv3-v2, trained further on shifted data)
inherits it. The script trains its own heads, from fresh weights, and ignores the layers the
shipped members now carry (`eagle3kit zoo add-mtp`, docs/zoo.md). Arms, all scored on the
child:
- random: a freshly initialised head (what an untrained layer gives);
- shipped: the parent's head as it is;
- fine-tuned: the shipped head after --tune-steps FastMTP steps on the child's data, at a
  third of --lr (a warm start's learning rate, as the demo's EAGLE-3 fine-tune takes);
- fresh: FastMTP from fresh weights on the child's data for --ship-steps.
--targets target trains every head on the target's own next-token law instead of the data's
tokens (the zoo's chat data is the stdlib's source, not the member's answers).
Per arm: offline per-position acceptance and tau on held-out samples of the child's data
(teacher-forced K steps, methods/mtp/train/finetune.evaluate_head), and online greedy decoding
(methods/mtp/decode.py,
depth --depth) on held-out requests (functions of the slice's held-out files): tau, whether
every output is token-identical to plain greedy, tok/s. The plain outputs' cross-prompt
figures (core/diversity.cross_prompt) say whether the member's answers depend on the prompt.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _env import environment  # noqa: E402
from _results import RESULTS, write_result  # noqa: E402


def member_dir(name: str, size: str, given: str | None) -> Path:
    """The member's dir: --member-dir, else the shipped zoo member (``zoo.get``)."""
    from eagle3kit import zoo

    return Path(given) if given else zoo.get(name, size=size)


def prepared(target_dir: Path, work: Path, tag: str, samples: int, max_len: int) -> Path:
    """A DATA dir of chat samples of the member's own slice (methods/mtp/train/zoo's recipe)."""
    from eagle3kit.methods.mtp.train import zoo as mtp_zoo

    out = work / tag
    if (out / "data" / "data.json").is_file():
        return out / "data"
    out.mkdir(parents=True, exist_ok=True)
    return mtp_zoo._prepare(target_dir, out, samples, max_len)


def requests(target_dir: Path, target, n: int) -> list[list[int]]:
    """Prompt ids of n held-out requests of the member's slice, in its chat template."""
    from eagle3kit.data.regenerate import chat_prompt_ids
    from eagle3kit.methods.mtp.train.zoo import _slice
    from eagle3kit.zoo import corpus

    sliced, signed = _slice(target_dir)
    reqs = corpus.held_out_requests(corpus.files(sliced, held_out=True), n, signed)
    return [chat_prompt_ids(target.tokenizer, r["messages"]) for r in reqs]


def train(target, data: Path, out: Path, steps: int, init: str | None, a, lr=None) -> Path:
    from eagle3kit.methods.mtp.train.finetune import MTPTrainConfig, train_mtp

    if not (out / "head" / "model.safetensors").is_file():
        cfg = MTPTrainConfig(
            target=target.name_or_path,
            data=str(data),
            out=str(out),
            init_from=init,
            steps=steps,
            batch_size=a.batch_size,
            max_len=a.max_len,
            lr=lr or a.lr,
            targets=a.targets,
        )
        train_mtp(cfg, target=target)
    return out / "head"


def fresh_init(target, out: Path) -> str:
    """A head dir of fresh weights (seed 0), to start the arms trained "from fresh weights":
    the shipped DeepSeek members carry their own MTP layer, which train_mtp would otherwise
    start from."""
    from eagle3kit.methods.mtp.model import MTPHead
    from eagle3kit.methods.mtp.train.finetune import save_head

    if not (out / "model.safetensors").is_file():
        torch.manual_seed(0)
        save_head(MTPHead.for_target(target), target, out, {"init": "fresh", "steps": 0})
    return str(out)


def online(target, head, prompts, plain, a) -> dict:
    from eagle3kit.methods.mtp.decode import mtp_generate

    runs, same, t0 = [], True, time.perf_counter()
    for ids, ref in zip(prompts, plain, strict=True):
        g = mtp_generate(target, head, ids, max_new_tokens=a.max_new_tokens, depth=a.depth)
        target.reset()
        same &= g.tokens == ref
        runs.append(g.stats)
    cycles = [c for s in runs for c in s.cycles]
    acc = [sum(c.accepted >= i for c in cycles) / len(cycles) for i in range(1, a.depth + 1)]
    return {
        "tau_online": sum(c.accepted + 1 for c in cycles) / len(cycles),
        "per_position_acceptance": acc,
        "cycles": len(cycles),
        "token_identical_to_plain": same,
        "tokens_per_s": sum(s.new_tokens for s in runs) / (time.perf_counter() - t0),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--member", default="dsv3-v2")
    p.add_argument("--parent", default="dsv3-v1")
    p.add_argument("--size", default="tiny", choices=["tiny", "full"])
    p.add_argument("--member-dir")
    p.add_argument("--parent-dir")
    p.add_argument("--ship-steps", type=int, default=200)
    p.add_argument("--tune-steps", type=int, default=100)
    p.add_argument("--samples", type=int, default=400)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-len", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--targets", default="data", choices=["data", "target"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work")
    p.add_argument("--json")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    run(a)


def run(a) -> None:
    from eagle3kit.core.diversity import cross_prompt
    from eagle3kit.data.prepared import load_prepared
    from eagle3kit.decode import greedy_generate
    from eagle3kit.methods.mtp.model import MTPHead, load_mtp_head
    from eagle3kit.methods.mtp.train.finetune import evaluate_head
    from eagle3kit.model.loading import load_target

    work = Path(a.work or tempfile.mkdtemp(prefix="bench-mtp-"))
    child_dir = member_dir(a.member, a.size, a.member_dir)
    parent_dir = member_dir(a.parent, a.size, a.parent_dir)
    parent = load_target(str(parent_dir))
    shipped = train(
        parent,
        prepared(parent_dir, work, "parent", a.samples, a.max_len),
        work / "shipped",
        a.ship_steps,
        fresh_init(parent, work / "init-parent"),
        a,
    )
    del parent
    child = load_target(str(child_dir))
    data_dir = prepared(child_dir, work, "child", a.samples, a.max_len)
    tuned = train(child, data_dir, work / "tuned", a.tune_steps, str(shipped), a, a.lr / 3)
    fresh = train(
        child, data_dir, work / "fresh", a.ship_steps, fresh_init(child, work / "init-child"), a
    )
    data = load_prepared(data_dir)
    _, held = data.split(0.05, 0)
    prompts = requests(child_dir, child, a.prompts)
    plain = []
    for ids in prompts:
        plain.append(greedy_generate(child, ids, max_new_tokens=a.max_new_tokens).tokens)
        child.reset()
    heads = {
        "random": MTPHead.for_target(child).eval(),
        "shipped": load_mtp_head(child, shipped),
        "fine-tuned": load_mtp_head(child, tuned),
        "fresh": load_mtp_head(child, fresh),
    }
    arms = {}
    for name, head in heads.items():
        off = evaluate_head(
            child, head, data, held, k=a.depth, batch=a.batch_size, max_len=a.max_len
        )
        arms[name] = {"offline": off, "online": online(child, head, prompts, plain, a)}
    doc = {
        "method": "mtp",
        "member": a.member,
        "parent": a.parent,
        "size": a.size,
        "member_dir": str(child_dir),
        "settings": {k: v for k, v in vars(a).items() if k not in ("json", "work")},
        "heldout_samples": len(held),
        "plain_outputs": cross_prompt(plain),
        "arms": arms,
        "machine": environment(),
    }
    _print(doc)
    out = Path(a.json) if a.json else RESULTS / f"mtp-{a.size}.json"
    write_result(out, "eagle3kit.bench_mtp", doc)
    print(f"wrote {out}", file=sys.stderr)


def _print(doc: dict) -> None:
    print(f"{doc['member']} ({doc['size']}): plain outputs {json.dumps(doc['plain_outputs'])}")
    print(f"{'arm':<12} {'tau off':>8} {'acc_1..K off':<22} {'tau on':>7} {'same':>5} {'tok/s':>7}")
    for name, r in doc["arms"].items():
        off, on = r["offline"], r["online"]
        accs = " ".join(f"{x:.2f}" for x in off["per_position_acceptance"])
        print(
            f"{name:<12} {off['tau_every_position']:>8.3f} {accs:<22} {on['tau_online']:>7.3f} "
            f"{str(on['token_identical_to_plain']):>5} {on['tokens_per_s']:>7.1f}"
        )


if __name__ == "__main__":
    main()
