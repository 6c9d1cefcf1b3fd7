"""Our EAGLE 3.1 and P-EAGLE drafters against vllm-project/speculators' models, logit by logit.

    python benchmarks/peer_logits.py [--json benchmarks/results/peer_logits.json]

1. On the tiny Llama zoo member (llama-v1-tiny), train an EAGLE 3.1 drafter (fc_norm +
   norm_output) by our training-time test for a few dozen steps on the target's own greedy
   text, and write it in speculators' layout (checkpoint.convert.save_drafter, "vllm").
2. speculators' Eagle3DraftModel, in its own venv (benchmarks/peers/speculators_logits.py),
   loads it strictly and runs its 3-step TTT forward on a held-out sequence (the target's aux
   states, the tokens): per-step logits [T, Vd].
3. Ours on the same inputs: (a) the training unroll (train/ttt.py); (b) the decoder's path:
   at several positions t the drafter over pairs 0..t into its cache, then one token per step
   with the previous step's output hidden, as decode/speculative.py drafts; (c) a control
   with the pre-norm state fed back (SpecForge's recurrence), which must NOT match.
4. P-EAGLE: the same drafter warm-started into P-EAGLE (mask_hidden added), written in
   speculators' peagle layout, run by speculators' PEagleDraftModel on a COD sample we fix
   (4 depths), against our COD pass and our decoder's parallel slots at those anchors.
5. P-EAGLE with 2 layers: the drafter speculators' own trainer wrote
   (tests/fixtures/peers/speculators-0.9.0/peagle-2layer), fine-tuned by `eagle3kit train
   --method peagle --init-from` on the tiny Llama's zoo chat data, its RUN/best loaded by
   speculators' PEagleDraftModel, compared as in 4 (and its layer 1 and mask_hidden must have
   moved: the fine-tune changed what is compared).

Pass: max |ours - peer| <= 1e-4 everywhere (float32). The peer venv comes from
benchmarks/peers/setup_speculators.sh (EAGLE3KIT_PEER_PYTHON names another interpreter).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _results import write_result  # noqa: E402
from bench_train import peer_python  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from decode_helpers import fit_ttt, pack, self_text  # noqa: E402

from eagle3kit import zoo  # noqa: E402
from eagle3kit.checkpoint.eagle3.convert import save_drafter  # noqa: E402
from eagle3kit.core.vocab import build_vocab  # noqa: E402
from eagle3kit.methods.peagle.model import PEagleDrafter, save_peagle  # noqa: E402
from eagle3kit.methods.peagle.train import cod_anchors, cod_layout  # noqa: E402
from eagle3kit.model.drafter import DraftCache, Eagle3Drafter  # noqa: E402
from eagle3kit.model.target import TargetModel  # noqa: E402
from eagle3kit.train.ttt import shift, unroll  # noqa: E402

TOL = 1e-4
PROMPTS = ["def ", "import ", "class ", "for i in ", "    return ", "if ", "# ", "with open("]
PEER = Path(__file__).parent / "peers" / "speculators_logits.py"
FIXTURE_2L = (
    Path(__file__).parents[1] / "tests/fixtures/peers/speculators-0.9.0/peagle-2layer"
)  # written by speculators 0.9.0's own trainer (benchmarks/peers/make_peer_fixtures.py)


def train_31(target, seqs, steps: int, k: int = 3) -> Eagle3Drafter:
    """An EAGLE 3.1 drafter (fc_norm + norm_output, draft vocab half the target's) trained by
    our TTT on `seqs`."""
    ids, am = pack(seqs)
    counts = torch.bincount(ids[am], minlength=target.vocab_size)
    d2t, t2d = build_vocab(counts, target.vocab_size // 2)  # a reduced vocab: d2t is exercised
    torch.manual_seed(0)
    d = Eagle3Drafter.for_target(
        target,
        draft_vocab_size=int(d2t.numel()),
        fc_norm=True,
        norm_output=True,
        dtype=torch.float32,
    )
    with torch.no_grad():
        d.d2t.copy_(d2t)
        d.t2d.copy_(t2d)
    return fit_ttt(d, target, ids, am, steps, k)


def run_peer(python: str, drafter: Path, inputs: dict, mode: str, k: int, tmp: Path) -> dict:
    from safetensors.torch import load_file, safe_open, save_file

    fin, fout = tmp / f"in-{mode}.safetensors", tmp / f"out-{mode}.safetensors"
    save_file({n: v.contiguous() for n, v in inputs.items()}, str(fin))
    cmd = [python, str(PEER), "--drafter", str(drafter), "--inputs", str(fin)]
    cmd += ["--out", str(fout), "--mode", mode, "--k", str(k)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"peer failed: {r.stderr.strip()[-2000:]}")
    with safe_open(str(fout), "pt") as f:
        meta = json.loads(f.metadata()["eagle3kit_peer"])
    return {"tensors": load_file(str(fout)), "meta": meta}


def decoder_path(d, nxt, aux, t: int, k: int, prenorm: bool = False) -> list[torch.Tensor]:
    """Logits [Vd] of steps 0..k-1 at position t, as the decoder drafts (teacher-forced
    tokens so they compare with a TTT unroll); `prenorm` feeds h instead of norm(h)."""
    cache = DraftCache()
    out = d(nxt[:, : t + 1], aux[:, : t + 1], cache, from_aux=True)
    rows, hidden = [out.logits[0, -1]], out.hidden[:, -1:]
    for i in range(1, k):
        if prenorm:  # SpecForge: the pre-norm state goes on; recompute it from the step
            hidden = _prenorm(d, nxt, aux, t, i)
        ids = nxt[:, t + i : t + i + 1] if t + i < nxt.shape[1] else nxt.new_zeros(1, 1)
        out = d(ids, hidden, cache, from_aux=False)
        rows.append(out.logits[0, -1])
        hidden = out.hidden[:, -1:]
    return rows


def _prenorm(d, nxt, aux, t, i):
    """The pre-norm state of step i-1 at t (a drafter with norm_output off, same weights)."""
    plain = d.blank(d.spec.replace(norm_output=False))
    plain.load_canonical(d.canonical_state(with_embedding=True))
    plain.eval()
    cache = DraftCache()
    out = plain(nxt[:, : t + 1], aux[:, : t + 1], cache, from_aux=True)
    h = out.hidden[:, -1:]
    for j in range(1, i):
        out = plain(nxt[:, t + j : t + j + 1], h, cache, from_aux=False)
        h = out.hidden[:, -1:]
    return h


def compare_31(d, target, seq, python, tmp, k=3) -> dict:
    ids = torch.tensor([seq])  # [1, T]
    with torch.no_grad():
        aux = target.prefill(ids).aux.float()  # [1, T, 3Ht]
        ours = list(unroll(d, ids, aux, k))  # k x [1, T, Vd]
    out = tmp / "e31"
    save_drafter(out, d.spec, d.canonical_state(with_embedding=False), "vllm")
    nxt = shift(ids, 1)
    inputs = {
        "input_ids": nxt,
        "hidden_states": aux,
        "position_ids": torch.arange(ids.shape[1])[None],
        "embed_tokens": d.embed_tokens.weight.detach(),
    }
    peer = run_peer(python, out, inputs, "eagle3", k, tmp)
    theirs = [peer["tensors"][f"logits_{i}"] for i in range(k)]
    unroll_diff = [float((o - p).abs().max()) for o, p in zip(ours, theirs, strict=True)]
    dec, ctrl = [], []
    ts = [2, ids.shape[1] // 2, ids.shape[1] - k - 1]
    with torch.no_grad():
        for t in ts:
            for i, row in enumerate(decoder_path(d, nxt, aux, t, k)):
                dec.append(float((row - theirs[i][0, t]).abs().max()))
            for i, row in enumerate(decoder_path(d, nxt, aux, t, k, prenorm=True)):
                if i > 0:
                    ctrl.append(float((row - theirs[i][0, t]).abs().max()))
    return {
        "positions": ids.shape[1],
        "k": k,
        "flags": {"fc_norm": d.spec.fc_norm, "norm_output": d.spec.norm_output},
        "max_abs_diff_unroll_by_step": unroll_diff,
        "decoder_positions": ts,
        "max_abs_diff_decoder": max(dec),
        "control_prenorm_recurrence_min_abs_diff": min(ctrl),
        "logit_scale": float(theirs[0].abs().max()),
        "peer": peer["meta"],
        "pass": max(unroll_diff) <= TOL and max(dec) <= TOL and min(ctrl) > 100 * TOL,
    }


def compare_peagle(d31, target, seq, python, tmp, k=4) -> dict:
    p = PEagleDrafter.from_eagle3(d31, mask_token_id=0, seed=0).eval()
    out = tmp / "pe"
    save_peagle(out, p.spec, p.canonical_state(), p.mask_token_id, None)
    return peagle_vs_peer(p, out, target, seq, python, tmp, k)


def finetune_peagle(fixture: Path, steps: int, tmp: Path) -> Path:
    """`eagle3kit train --method peagle --init-from FIXTURE` on the tiny Llama's prepared zoo
    chat data (tests/test_train_helpers.py tiny_data); returns RUN/best."""
    import os

    os.environ.setdefault("EAGLE3KIT_HOME", str(tmp / "home"))
    from test_train_helpers import tiny_data, tiny_target, train_args

    data, tgt = tiny_data("llama-v1"), tiny_target("llama-v1")
    args = [a for a in train_args(tmp / "run", data, tgt) if a not in ("--draft-vocab-size", "96")]
    args += ["--init-from", str(fixture), "--method", "peagle", "--ttt-steps", "4"]
    args += ["--steps", str(steps), "--lr", "3e-3"]
    cmd = [sys.executable, "-m", "eagle3kit", *args, "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"train failed: {r.stderr.strip()[-2000:]}")
    return tmp / "run" / "best"


def compare_peagle_finetuned(target, seq, python, tmp, steps: int, k=4) -> dict:
    """A 2-layer P-EAGLE drafter written by speculators' own trainer (tests/fixtures/peers),
    fine-tuned by `train --init-from`, against speculators' PEagleDraftModel on our file."""
    from eagle3kit.model.loading import load_drafter

    best = finetune_peagle(FIXTURE_2L, steps, tmp)
    p = load_drafter(str(best)).drafter
    p.set_embedding(target.embed_tokens.weight)
    start = load_drafter(str(FIXTURE_2L)).drafter
    moved = {
        n: float((t - start.state_dict()[n]).abs().max())
        for n, t in p.canonical_state(with_embedding=False).items()
        if n.startswith("layers.1.") or n == "mask_hidden"
    }
    doc = peagle_vs_peer(p, best, target, seq, python, tmp, k)
    doc.update(
        layers=p.num_layers,
        train_steps=steps,
        fixture=str(FIXTURE_2L.relative_to(Path(__file__).parents[1])),
        max_abs_change_layer1_and_mask_hidden=max(moved.values()),
    )
    doc["pass"] = doc["pass"] and max(moved.values()) > 100 * TOL
    return doc


def peagle_vs_peer(p, written: Path, target, seq, python, tmp, k) -> dict:
    """Our COD pass and decoder slots of P-EAGLE drafter `p` against speculators'
    PEagleDraftModel loading `written` (p's own file) on the same COD sample."""
    ids = torch.tensor([seq])
    t = ids.shape[1]
    with torch.no_grad():
        aux = target.prefill(ids).aux.float()
    g = torch.Generator().manual_seed(0)
    anchors = cod_anchors(torch.ones(t - 2, dtype=torch.bool), k, 0.7, 0.2, g)
    anchor, depth, mask = cod_layout(t, anchors, "cpu")
    nxt = shift(ids, 1)[0]
    sid, shid = p.slot_inputs(1, 1)
    first = depth == 0
    with torch.no_grad():
        x = torch.where(first, nxt[anchor], sid[0, 0])
        h = torch.where(first[:, None], aux[0][anchor], shid[0, 0])
        ours = p(x[None], h[None], None, (anchor + depth)[None], mask, from_aux=True).logits
    inputs = {
        "input_ids": nxt[None],
        "hidden_states": aux,
        "position_ids": torch.arange(t)[None],
        "embed_tokens": p.embed_tokens.weight.detach(),
        "anchor": anchor,
        "depth": depth,
    }
    peer = run_peer(python, written, inputs, "peagle", k, tmp)
    theirs = peer["tensors"]["logits"]
    dec = []
    with torch.no_grad():  # the decoder's parallel slots at anchors kept at every depth
        for a in anchors[-1].tolist()[:3]:
            cache = DraftCache()
            first_out = p(nxt[None, : a + 1], aux[:, : a + 1], cache, from_aux=True)
            rows = [first_out.logits[0, -1]] + list(p.parallel_slots(k - 1, cache).logits[0])
            for dd, row in enumerate(rows):
                j = int(((anchor == a) & (depth == dd)).nonzero()[0, 0])
                dec.append(float((row - theirs[0, j]).abs().max()))
    diff = float((ours - theirs).abs().max())
    return {
        "elements": int(anchor.numel()),
        "per_depth": [t] + [int(a.numel()) for a in anchors],
        "max_abs_diff_cod_pass": diff,
        "max_abs_diff_decoder_slots": max(dec) if dec else None,
        "logit_scale": float(theirs.abs().max()),
        "peer": peer["meta"],
        "pass": diff <= TOL and (not dec or max(dec) <= TOL),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the result file here")
    ap.add_argument("--steps", type=int, default=60, help="TTT steps of the 3.1 drafter")
    ap.add_argument("--peagle-steps", type=int, default=20, help="fine-tune steps, 2 layers")
    a = ap.parse_args()
    python, why = peer_python()
    if python is None:
        raise SystemExit(f"peer not available: {why}")
    torch.set_num_threads(2)
    target = TargetModel.from_pretrained(zoo.get("llama-v1", size="tiny"))
    seqs = self_text(target, PROMPTS, n=32)
    d = train_31(target, seqs[:-1], a.steps)
    with tempfile.TemporaryDirectory() as tmp:
        e31 = compare_31(d, target, seqs[-1], python, Path(tmp))
        pe = compare_peagle(d, target, seqs[-1], python, Path(tmp))
        pe2 = compare_peagle_finetuned(target, seqs[-1], python, Path(tmp), a.peagle_steps)
    doc = {
        "target": "llama-v1-tiny",
        "tolerance": TOL,
        "eagle3.1": e31,
        "peagle": pe,
        "peagle_2layer_finetuned": pe2,
    }
    print(json.dumps({k: v for k, v in doc.items()}, indent=1, default=str)[:4000])
    if a.json:
        write_result(a.json, "peer_logits", doc)


if __name__ == "__main__":
    main()
