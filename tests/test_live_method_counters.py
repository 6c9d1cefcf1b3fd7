"""`bench --url` against DFlash, P-EAGLE and MTP servers: the fake engines decode with each
method's drafter and report what vLLM and SGLang report for it (tests/fake_methods.py cites the
sources); the run's tau and per-position acceptance must equal the fake's own decoder log, and
the server must be read as the method it serves. Drafters are oracles (a real drafter pass whose
proposals are the target's known greedy continuation, wrong at some positions), so acceptance
varies from none to all drafts per step and every position is exercised."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from fake_engine import FakeEngine

from eagle3kit.decode import greedy_generate
from eagle3kit.live.bench import LiveConfig, run_live_bench
from eagle3kit.live.suites import Prompt
from eagle3kit.plan.method_inputs import read_live

TEXT = "def main(args):\n    "
K = 3  # drafts per step; DFlash block B = K + 1
ZLAB_IDS = (1, 3)  # DFlash target layers on the 8-layer tiny member (aux ids 2, 4)


def load(method: str):
    """The tiny Llama member; DFlash reads the z-lab layers' outputs as its aux states."""
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    torch.set_num_threads(1)
    aux = [i + 1 for i in ZLAB_IDS] if method == "dflash" else None
    return TargetModel.from_pretrained(zoo.get("llama-v1", size="tiny"), aux_layers=aux)


def greedy_seq(target) -> tuple[int, list[int]]:
    """(prompt length, the prompt as the fake tokenizes it + the target's greedy answer)."""
    ids = target.tokenizer(TEXT)["input_ids"]
    eos = target.tokenizer.eos_token_id
    out = greedy_generate(target, ids, max_new_tokens=24, eos_token_id=eos).tokens
    target.reset()
    return len(ids), ids + out


def _right(p: int) -> bool:
    return p * 7919 % 10 > 2  # about 7 positions in 10 drafted right


def dflash_oracle(target, seq):
    from eagle3kit.methods.dflash.model import DFlashDrafter

    class Oracle(DFlashDrafter):
        def forward(self, block_ids, aux, position_ids, cache=None, attn_mask=None):
            self.block_pos = position_ids[0, -block_ids.shape[1] :]
            return super().forward(block_ids, aux, position_ids, cache, attn_mask)

        def logits(self, hidden):
            toks = [_tok(seq, p) for p in self.block_pos[1:].tolist()]
            return torch.nn.functional.one_hot(torch.tensor(toks), self.spec.vocab_size).float()

    torch.manual_seed(0)
    d = DFlashDrafter.for_target(target, block_size=K + 1, target_layer_ids=ZLAB_IDS)
    d.__class__ = Oracle
    return d


def _one_hot(shape_like: torch.Tensor, toks: list[int]) -> torch.Tensor:
    out = torch.full_like(shape_like, -1e4)
    for j, t in enumerate(toks):
        out[0, j, t] = 0.0
    return out


def peagle_oracle(target, seq):
    """P-EAGLE: the drafter's output on pair t guesses x_{t+2}; slot i after a cache of m
    pairs guesses x_{m+2+i} (methods/peagle/decode.py)."""
    from decode_helpers import new_drafter

    from eagle3kit.methods.peagle.model import PEagleDrafter

    class Oracle(PEagleDrafter):
        def forward(self, ids, hidden, cache=None, *a, **kw):
            start = cache.length if cache is not None else 0
            out = super().forward(ids, hidden, cache, *a, **kw)
            toks = [_tok(seq, start + j + 2) for j in range(ids.shape[1])]
            return SimpleNamespace(logits=_one_hot(out.logits, toks), hidden=out.hidden)

        def parallel_slots(self, n, cache, *a, **kw):
            m = cache.length
            out = super().parallel_slots(n, cache, *a, **kw)
            toks = [_tok(seq, m + 2 + i) for i in range(n)]
            return SimpleNamespace(logits=_one_hot(out.logits, toks), hidden=out.hidden)

    d = PEagleDrafter.from_eagle3(new_drafter(target), mask_token_id=3).eval()
    d.__class__ = Oracle
    return d


def _tok(seq: list[int], p: int) -> int:
    return seq[p] if p < len(seq) and _right(p) else 0


class OracleHead:
    """An MTP head (its cache moves as the real one's) answering x_{t+2} for pair t."""

    method = "mtp"

    def __init__(self, target, seq: list[int]) -> None:
        from eagle3kit.methods.mtp.model import MTPHead

        self.head, self.seq = MTPHead.for_target(target).eval(), seq
        self.vocab_size = self.head.vocab_size

    def __call__(self, ids, hidden, cache, position_ids=None, **kw):
        start = cache.length
        out = self.head(ids, hidden, cache, position_ids=position_ids, **kw)
        toks = [_tok(self.seq, start + j + 2) for j in range(ids.shape[1])]
        return SimpleNamespace(logits=_one_hot(out.logits, toks), hidden=out.hidden)


ORACLES = {"dflash": dflash_oracle, "peagle": peagle_oracle, "mtp": OracleHead}
CASES = [
    ("dflash", "vllm", "completions"),
    ("dflash", "sglang", "generate"),
    ("peagle", "vllm", "completions"),
    ("mtp", "vllm", "completions"),
    ("mtp", "sglang", "generate"),
]


@pytest.mark.slow  # five fake servers in turn, two requests each (a few seconds in all)
@pytest.mark.parametrize(("method", "engine", "endpoint"), CASES)
def test_bench_url_reads_each_method(method, engine, endpoint, tmp_path):
    target = load(method)
    n, seq = greedy_seq(target)
    drafter = ORACLES[method](target, seq)
    cfg = LiveConfig(
        prompts=[Prompt("s", "0", (TEXT,))],
        max_tokens=24,
        repeats=2,
        endpoint=endpoint,
        timeout=300,
    )
    kw = {"engine": engine, "depth": K, "lifetime": 300, "dev_mode": True}
    with FakeEngine(target, None, **kw) as base, FakeEngine(target, drafter, **kw) as eng:
        doc = run_live_bench([eng.url], base.url, cfg)
        log = list(eng.log)
    assert doc["errors"] == []
    assert all(e["tokens_ids"] == seq[n:] for e in log)  # lossless
    acc = [a for e in log for a in e["accepted"]]
    assert 0 in acc and K in acc, acc  # none and all drafts accepted in some step
    spec = next(d for d in doc["deployments"] if d["role"] == "speculative")
    assert spec["server"]["speculative"]["method"] == method
    assert spec["tau_bound"] == 1 + K  # SGLang DFLASH: num_steps 1, num_draft_tokens B
    got = spec["levels"][0]["acceptance"]
    assert got["source"] == ("counters" if engine == "vllm" else "per-request")
    want = [sum(a >= i for a in acc) / len(acc) for i in range(1, K + 1)]
    assert got["per_position_acceptance"] == pytest.approx(want)
    assert got["tau_online"] == pytest.approx(1 + sum(acc) / len(acc))
    f = tmp_path / "live.json"
    f.write_text(json.dumps(doc))
    _, (cand,) = read_live(f)
    assert cand.method == method and list(cand.per_position) == pytest.approx(want)


def test_server_settings_name_the_method():
    """What each engine says about itself, read as eagle3kit's method, and the depth its
    settings allow (SGLang DFLASH: num_steps forced to 1, the block B in num_draft_tokens)."""
    from eagle3kit.live.server import sglang_speculative, vllm_method
    from eagle3kit.live.summary import tau_bound

    def sg(algo, draft, steps, ndt):
        doc = {"model_path": "/m/t", "speculative_algorithm": algo}
        doc.update(speculative_draft_model_path=draft, speculative_num_steps=steps)
        doc.update(speculative_eagle_topk=1, speculative_num_draft_tokens=ndt)
        return sglang_speculative(doc)

    dflash = sg("DFLASH", "/m/d", 1, 16)
    assert dflash["method"] == "dflash" and tau_bound(dflash)[0] == 16  # B - 1 drafts + 1
    mtp = sg("EAGLE", "/m/t", 3, 4)  # NEXTN after SGLang's rewrite: drafts from the model
    assert mtp["method"] == "mtp" and tau_bound(mtp)[0] == 4
    assert sg("EAGLE3", "/m/d", 3, 4)["method"] == "eagle3"
    assert sg("NGRAM", None, 3, 4)["method"] == "ngram"
    assert vllm_method({"method": "eagle3", "parallel_drafting": True}) == "peagle"
    assert vllm_method({"method": "eagle3"}) == "eagle3"
    assert vllm_method({"method": "dflash"}) == "dflash"
    assert vllm_method({"method": "mtp"}) == vllm_method({"method": "deepseek_mtp"}) == "mtp"
    with pytest.raises(ValueError, match="SGLang does not serve P-EAGLE"):
        FakeEngine(None, "ngram", engine="sglang", method="peagle")
