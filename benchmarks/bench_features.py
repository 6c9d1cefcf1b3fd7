"""Feature-store size and fidelity: ours (fp8 aux + top-K teacher) vs SpecForge's offline layout.

    python benchmarks/bench_features.py [--member dsv3-v1] [--size auto|full|tiny] [--samples 48]
                                        [--topk 64] [--repeats 3] [--threads 2]
                                        [--store-hidden 7168]
                                        [--json benchmarks/results/bench_features.json]

0. A real store at H = 7168 (`--store-hidden`), written to disk and read back. A stand-in target
   (`SyntheticLayers`) gives aux hidden states of that width for the prepared samples below,
   and eagle3kit.data.store.capture, the writer `data capture` uses, writes the store; SpecForge's
   layout for the same tokens is written beside it (per sample: aux 3H + last hidden H in bf16,
   input_ids and loss_mask int64, as scripts/prepare_hidden_states.py of sgl-project/SpecForge
   at commit f1424fb saves a DataPoint per sample; here as safetensors rather than torch.save).
   Reported: bytes per token on disk (all files / tokens) for both, and the aux error of each
   read back against the exact values: mean |x' - x| / mean |x| over all entries, the same over
   ordinary channels, and the max absolute and relative error on the outlier channels.

   The synthetic values follow what has been measured in real LLM layers, since no real
   7168-wide model can run here: heavy tails (a Gaussian scale mixture, kurtosis ~8: hidden
   states are far from Gaussian), a few outlier channels per layer, fixed across tokens with a
   fixed sign, 20-100x the typical magnitude (the "outlier features" of Dettmers et al. 2022,
   LLM.int8(), arXiv:2208.07339, and the per-channel outliers of Xiao et al. 2023,
   SmoothQuant, arXiv:2211.10438), and a per-token scale that varies several-fold (lognormal,
   sigma 0.5; per-token activation ranges differ widely, which is why per-token scales are used).
   These are stand-ins for a real layer's statistics, not a real layer's values.

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
from types import SimpleNamespace

import torch
import transformers  # noqa: F401  (so that the environment line names it)

sys.path.insert(0, str(Path(__file__).parent))
from _env import environment, stats  # noqa: E402

OUTLIERS_PER_LAYER = 6


class SyntheticLayers:
    """A stand-in target for `capture`: aux [B, T, k*H] with a real layer's statistics
    (module docstring, 0.) and random logits; records the exact aux of every real token."""

    def __init__(self, hidden: int, vocab_size: int, k: int = 3, seed: int = 0) -> None:
        self.hidden_size, self.vocab_size, self.k = hidden, vocab_size, k
        self.aux_layers = tuple(range(1, k + 1))
        self.device = torch.device("cpu")
        self.gen = torch.Generator().manual_seed(seed)
        g = self.gen
        self.outliers = [torch.randperm(hidden, generator=g)[:OUTLIERS_PER_LAYER] for _ in range(k)]
        self.channel_scale = torch.exp(0.3 * torch.randn(k, hidden, generator=g))  # [k, H]
        self.outlier_gain = 20 + 80 * torch.rand(k, OUTLIERS_PER_LAYER, generator=g)  # 20-100x
        self.outlier_sign = torch.randint(0, 2, (k, OUTLIERS_PER_LAYER), generator=g) * 2 - 1
        self.exact: list[torch.Tensor] = []  # per sample, in capture order: [n, k*H]

    def identity(self) -> dict:
        return {
            "name_or_path": "synthetic",
            "model_type": "synthetic-layers",
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "aux_layers": list(self.aux_layers),
        }

    def layer(self, n: int, j: int) -> torch.Tensor:
        """[n, H] values of aux layer j for n tokens."""
        g, h = self.gen, self.hidden_size
        mix = torch.exp(0.5 * torch.randn(n, h, generator=g))  # scale mixture: heavy tails
        x = torch.randn(n, h, generator=g) * mix * self.channel_scale[j]  # [n, H]
        typical = 0.8  # ~ median |x| of the ordinary channels
        o = self.outliers[j]
        noise = 1 + 0.1 * torch.randn(n, len(o), generator=g)
        x[:, o] = typical * self.outlier_gain[j] * self.outlier_sign[j] * noise
        token_scale = torch.exp(0.5 * torch.randn(n, 1, generator=g))  # per-token scale
        return x * token_scale

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        b, t = input_ids.shape
        aux = torch.cat([self.layer(b * t, j) for j in range(self.k)], -1).view(b, t, -1)
        for row in range(b):
            self.exact.append(aux[row, : int(attention_mask[row].sum())].clone())
        logits = torch.randn(b, t, self.vocab_size, generator=self.gen)  # [B, T, V]
        return SimpleNamespace(logits=logits, aux=aux)


def aux_errors(exact: torch.Tensor, got: torch.Tensor, outlier_cols: torch.Tensor) -> dict:
    """Sums for mean relative errors, and max errors on the outlier columns ([n, k*H] each)."""
    err = (got.float() - exact).abs()
    ordinary = torch.ones(exact.shape[1], dtype=torch.bool)
    ordinary[outlier_cols] = False
    oe, ox = err[:, outlier_cols], exact[:, outlier_cols].abs()
    return {
        "err": float(err.sum()),
        "abs": float(exact.abs().sum()),
        "err_ordinary": float(err[:, ordinary].sum()),
        "abs_ordinary": float(exact[:, ordinary].abs().sum()),
        "outlier_max_abs_err": float(oe.max()),
        "outlier_max_rel_err": float((oe / ox).max()),
        "outlier_max_abs": float(ox.max()),
    }


def merge_errors(parts: list[dict]) -> dict:
    tot = {
        key: sum(p[key] for p in parts) for key in ("err", "abs", "err_ordinary", "abs_ordinary")
    }
    return {
        "mean_rel_err": tot["err"] / tot["abs"],
        "mean_rel_err_ordinary_channels": tot["err_ordinary"] / tot["abs_ordinary"],
        "outlier_max_abs_err": max(p["outlier_max_abs_err"] for p in parts),
        "outlier_max_rel_err": max(p["outlier_max_rel_err"] for p in parts),
        "outlier_max_abs_value": max(p["outlier_max_abs"] for p in parts),
    }


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def specforge_layout(syn: SyntheticLayers, data: Path, out: Path) -> tuple[int, dict]:
    """Write SpecForge's per-sample layout (bf16 aux 3H + last hidden H, int64 ids and mask);
    read each back. (bytes on disk, aux error of the bf16 copy)."""
    from safetensors.torch import load_file, save_file

    from eagle3kit.data.prepared import load_prepared

    d = load_prepared(data)
    out.mkdir(parents=True)
    cols = outlier_columns(syn)
    parts = []
    for i, exact in enumerate(syn.exact):
        n = exact.shape[0]
        s = d[i]
        f = out / f"data_{i}.safetensors"
        save_file(
            {
                "input_ids": s.input_ids[:n].long().contiguous(),  # [n]
                "loss_mask": s.loss_mask[:n].long().contiguous(),  # [n]
                "aux_hidden_state": exact.bfloat16(),  # [n, 3H]
                "hidden_state": syn.layer(n, syn.k - 1).bfloat16(),  # [n, H] the last layer
            },
            str(f),
        )
        parts.append(aux_errors(exact, load_file(str(f))["aux_hidden_state"], cols))
    return dir_bytes(out), merge_errors(parts)


def outlier_columns(syn: SyntheticLayers) -> torch.Tensor:
    return torch.cat([o + j * syn.hidden_size for j, o in enumerate(syn.outliers)])


def store_at_scale(data: Path, vocab: Path, vocab_size: int, hidden: int, topk: int, tmp: Path):
    """0. (module docstring): our store and SpecForge's layout at width `hidden`, on disk."""
    from eagle3kit.data.store import FeatureStore, bytes_per_token, capture

    syn = SyntheticLayers(hidden, vocab_size)
    t0 = time.perf_counter()
    res = capture(data, syn, tmp / "ours", vocab=vocab, topk=topk)
    write_s = time.perf_counter() - t0
    fs, cols = FeatureStore(tmp / "ours"), outlier_columns(syn)
    parts = []
    for i, exact in enumerate(syn.exact):
        got = fs.get([i]).aux[0, : exact.shape[0]]  # [n, k*H] dequantised
        parts.append(aux_errors(exact, got, cols))
    tokens = res["tokens"]
    ours_bytes = dir_bytes(tmp / "ours")
    sf_bytes, sf_err = specforge_layout(syn, data, tmp / "specforge")
    return {
        "H": hidden,
        "aux_layers": syn.k,
        "topk": topk,
        "tokens": tokens,
        "samples": res["samples"],
        "outlier_channels_per_layer": OUTLIERS_PER_LAYER,
        "ours": {
            "bytes_on_disk": ours_bytes,
            "bytes_per_token": ours_bytes / tokens,
            "shard_bytes_per_token": res["bytes_per_token"],
            "formula_bytes_per_token": bytes_per_token(
                syn.k, hidden, topk, res["vocab"]["draft_vocab_size"]
            ),
            "write_s": write_s,
            "aux": merge_errors(parts),
        },
        "specforge": {
            "bytes_on_disk": sf_bytes,
            "bytes_per_token": sf_bytes / tokens,
            "formula_bytes_per_token": 8 * hidden + 16,
            "aux": sf_err,
        },
        "ratio_bytes_per_token": ours_bytes / sf_bytes,
    }


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

    model = zoo.get(member, size=size)
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


def print_store_at_scale(b: dict) -> None:
    o, f = b["ours"], b["specforge"]
    print(
        f"\nstore at H={b['H']} on disk ({b['tokens']} tokens, {b['samples']} samples, "
        f"synthetic aux with {b['outlier_channels_per_layer']} outlier channels per layer, "
        f"top-{b['topk']}):"
    )
    for name, x in (("ours (fp8 + top-K)", o), ("SpecForge (bf16)", f)):
        a = x["aux"]
        print(
            f"  {name:19} {x['bytes_per_token']:>9.1f} bytes/token (formula "
            f"{x['formula_bytes_per_token']}); aux mean rel err {a['mean_rel_err']:.4f} "
            f"(ordinary channels {a['mean_rel_err_ordinary_channels']:.4f}); outlier channels: "
            f"max abs err {a['outlier_max_abs_err']:.3g} on values up to "
            f"{a['outlier_max_abs_value']:.3g}, max rel err {a['outlier_max_rel_err']:.4f}"
        )
    print(f"  ours / SpecForge bytes on disk: {b['ratio_bytes_per_token']:.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--member", default="dsv3-v1")
    ap.add_argument("--size", default="auto", choices=["auto", "full", "tiny"])
    ap.add_argument("--samples", type=int, default=48)
    ap.add_argument("--topk", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--store-hidden", type=int, default=7168, help="0: skip the store at scale")
    ap.add_argument("--json", default=None, help="write the result JSON here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from eagle3kit import zoo
    from eagle3kit.data.store import capture
    from eagle3kit.model.target import TargetModel

    size = args.size if args.size != "auto" else ("full" if zoo.is_shipped(args.member) else "tiny")
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
        big = None
        if args.store_hidden:
            big = store_at_scale(
                data, vocab, target.vocab_size, args.store_hidden, args.topk, tmp / "big"
            )
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
            f"{'':22}{x['H']:>5} {x['draft_vocab']:>6} {x['topk']:>4} {x['ours']:>7} "
            f"{x['specforge']:>13}  {x['ratio']:.1%}"
        )
    print(
        f"measured on disk (zoo, K={args.topk}): {res['bytes_per_token']:.1f} bytes/token "
        f"(headers and offsets included) = {res['bytes_per_token'] / (8 * h):.1%} of 8H"
    )
    print(f"\naux fidelity: mean|aux - dequant(aux)| / mean|aux| = {fid['aux_rel_err']:.4f}")
    for k, m in fid["teacher_mass_kept"].items():
        print(f"teacher mass kept by top-{k:<4} {m:.4f}")
    print(f"\ncapture speed: {stats(speeds)} tokens/s")
    if big:
        print_store_at_scale(big)
    if args.json:
        from _results import write_result

        doc = {
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
            "store_at_scale": big,
        }
        write_result(args.json, "eagle3kit.bench_features", doc)


if __name__ == "__main__":
    main()
