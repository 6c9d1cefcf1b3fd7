"""Feature-store size and fidelity: ours (fp8 aux + top-K teacher) vs SpecForge's offline layout.

    python benchmarks/bench_features.py [--member dsv3-v1] [--size auto|full|tiny] [--samples 48]
                                        [--topk 64] [--repeats 3] [--threads 2] [--json out.json]

1. Bytes per token. SpecForge stores aux 3H + the last hidden state H in bf16: 8H bytes. Ours
   (eagle3kit.data.store): k*H fp8 aux + 4k scale bytes + 9 bytes of ids/mask/argmax + K fp16
   log-probs + K int16 draft ids. Printed at H = 7168 (Kimi-K2 / DeepSeek-V3, Vd = 32000) and
   at the zoo member's H, from the formula and as measured on disk (shard bytes / tokens).
2. Fidelity on the zoo member, over chat samples built from held-out stdlib files (prepared
   with its chat template; draft vocab = the most frequent quarter of its vocab):
   - aux: mean |aux - dequant(quant(aux))| / mean |aux| over real tokens, read back from the store;
   - teacher: the mean share of the teacher's probability mass (over the draft vocab) that the
     top-K kept, for several K; the fraction of tokens whose argmax is in the kept set is 1 by
     construction.
3. Capture speed: tokens/s of `capture` (median/min/max over --repeats fresh stores).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers  # noqa: F401  (so that the environment line names it)

sys.path.insert(0, str(Path(__file__).parent))
from _env import environment, environment_info, stats  # noqa: E402


def size_rows(h_zoo: int, vd_zoo: int, topk: int) -> list[dict]:
    from eagle3kit.data.store import bytes_per_token

    rows = []
    for h, vd, k_top in (
        (7168, 32000, topk),
        (7168, 32000, 16),
        (h_zoo, vd_zoo, topk),
        (h_zoo, vd_zoo, 16),
    ):
        ours, spec = bytes_per_token(3, h, k_top, vd), 8 * h
        rows.append(
            {
                "H": h,
                "draft_vocab": vd,
                "topk": k_top,
                "ours": ours,
                "specforge": spec,
                "ratio": ours / spec,
            }
        )
    return rows


def build_data(member: str, size: str, tmp: Path, n: int) -> tuple[Path, Path, Path, int]:
    """(model dir, DATA dir, vocab file, draft vocab size) for n held-out chat samples."""
    from eagle3kit import zoo
    from eagle3kit.data.prepare import prepare
    from eagle3kit.data.vocab_counts import draft_vocab
    from eagle3kit.zoo import corpus as _corpus

    model = zoo.build(member, size=size)
    convs = _corpus.chat_samples(_corpus.files("lib", held_out=True))
    convs = _corpus.spaced(convs, n)
    (tmp / "chat.jsonl").write_text("".join(json.dumps(c) + "\n" for c in convs))
    prepare([tmp / "chat.jsonl"], model, tmp / "D", max_length=256)
    vocab = json.loads((Path(model) / "config.json").read_text())["vocab_size"]
    vd = vocab // 4
    draft_vocab(tmp / "D", vd, tmp / "vocab.safetensors")
    return Path(model), tmp / "D", tmp / "vocab.safetensors", vd


def fidelity(target, data: Path, store: Path, vocab: Path, ks: list[int]) -> dict:
    """Aux relative error (store vs exact) and top-K teacher mass, over all real tokens."""
    from eagle3kit.core.vocab import load_vocab
    from eagle3kit.data.features import compute_features
    from eagle3kit.data.prepared import collate, load_prepared
    from eagle3kit.data.store import FeatureStore

    d, fs = load_prepared(data), FeatureStore(store)
    d2t = load_vocab(vocab)[0]
    err = ref_abs = 0.0
    mass = {k: [] for k in ks}
    for a in range(0, len(d), 8):
        idx = list(range(a, min(a + 8, len(d))))
        ref = compute_features(target, *collate([d[i] for i in idx]), d2t, topk=None)
        got = fs.get(idx)
        m = ref.attention_mask  # [B, T]
        err += float((got.aux - ref.aux).abs()[m].sum())
        ref_abs += float(ref.aux.abs()[m].sum())
        p = ref.teacher_logp[m].exp().sort(dim=-1, descending=True).values  # [N, Vd]
        for k in ks:
            mass[k].append(p[:, :k].sum(-1))
    return {
        "aux_rel_err": err / ref_abs,
        "teacher_mass_kept": {k: float(torch.cat(v).mean()) for k, v in mass.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--member", default="dsv3-v1")
    ap.add_argument("--size", default="auto", choices=["auto", "full", "tiny"])
    ap.add_argument("--samples", type=int, default=48)
    ap.add_argument("--topk", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from eagle3kit import zoo
    from eagle3kit.data.store import capture
    from eagle3kit.model.target import TargetModel

    size = args.size if args.size != "auto" else ("full" if zoo.is_built(args.member) else "tiny")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        model, data, vocab, vd = build_data(args.member, size, tmp, args.samples)
        target = TargetModel.from_pretrained(model)
        speeds, res = [], None
        for r in range(args.repeats):
            t0 = time.perf_counter()
            res = capture(data, target, tmp / f"S{r}", vocab=vocab, topk=args.topk)
            speeds.append(res["tokens"] / (time.perf_counter() - t0))
        ks = sorted({1, 4, 16, args.topk, 256} - {0})
        fid = fidelity(target, data, tmp / "S0", vocab, [k for k in ks if k <= vd])
    h = target.hidden_size
    rows = size_rows(h, vd, args.topk)
    print(
        f"# bench_features: {args.member} ({size}), H={h}, aux layers {list(target.aux_layers)}, "
        f"draft vocab {vd}, {res['samples']} samples / {res['tokens']} tokens"
    )
    print(f"# {environment()}")
    print("\nbytes/token (formula)   H     Vd     K    ours  SpecForge 8H  ratio")
    for x in rows:
        print(
            f"{'':22}{x['H']:>5} {x['draft_vocab']:>6} {x['topk']:>4} {x['ours']:>7} {x['specforge']:>13}  {x['ratio']:.1%}"
        )
    print(
        f"measured on disk (zoo, K={args.topk}): {res['bytes_per_token']:.1f} bytes/token "
        f"(headers and offsets included) = {res['bytes_per_token'] / (8 * h):.1%} of 8H"
    )
    print(f"\naux fidelity: mean|aux - dequant(aux)| / mean|aux| = {fid['aux_rel_err']:.4f}")
    for k, m in fid["teacher_mass_kept"].items():
        print(f"teacher mass kept by top-{k:<4} {m:.4f}")
    print(f"\ncapture speed: {stats(speeds)} tokens/s")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "member": args.member,
                    "size": size,
                    "hidden_size": h,
                    "draft_vocab": vd,
                    "tokens": res["tokens"],
                    "sizes": rows,
                    "measured_bytes_per_token": res["bytes_per_token"],
                    "fidelity": fid,
                    "capture_tokens_per_s": {
                        "median": statistics.median(speeds),
                        "min": min(speeds),
                        "max": max(speeds),
                    },
                    "environment": environment_info(),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
