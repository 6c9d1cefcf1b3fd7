"""Test fixture: what the fake engines (tests/fake_engine.py) say and do per speculative method.

The decoding is eagle3kit's own (decode/speculative.py for EAGLE-3 chains and P-EAGLE's one-pass
chain, methods/dflash/decode.py for DFlash blocks, methods/mtp/decode.py for an MTP head used
recursively,
methods/lookup/decode.py for prompt lookup); what the servers report about it follows the engines:

- vLLM counts every method alike. The scheduler calls `make_spec_decoding_stats(num_draft_tokens
  = len(scheduled_spec_token_ids), num_accepted_tokens = len(generated_token_ids) - 1)` once per
  request per step (vllm/v1/core/sched/scheduler.py, `update_from_output`), and
  `SpecDecodingStats.observe_draft` adds 1 draft, the draft tokens, the accepted tokens and one
  per accepted position (vllm/v1/spec_decode/metrics.py, vllm-project/vllm@016a858). A DFlash
  step proposes `num_speculative_tokens` = K tokens from a query block of 1 + K (the bonus and K
  mask slots: vllm/v1/spec_decode/dflash.py, `set_inputs_first_pass`, `num_query_per_req = 1 +
  num_speculative_tokens`), so its block B is K + 1 and its counters read as a chain of K.
  P-EAGLE is `"method": "eagle3"` with `"parallel_drafting": true`
  (vllm/config/speculative.py); MTP is `"method": "mtp"` with the target as its own drafter.
- SGLang counts per request: `spec_verify_ct` += 1 per verify and the accepted drafts of it
  (the DFlash and EAGLE workers alike), and reports `spec_num_proposed_drafts` = verify count x
  (`speculative_num_draft_tokens` - 1) (python/sglang/srt/managers/tokenizer_manager_components/
  spec_decoding_meta.py, sgl-project/sglang@9155cf0). For DFLASH, `_handle_dflash` forces
  `speculative_num_steps` and `speculative_eagle_topk` to 1 and sets
  `speculative_num_draft_tokens` to the block size B (python/sglang/srt/arg_groups/
  speculative_hook.py; DFlashWorker takes `block_size = speculative_num_draft_tokens`,
  python/sglang/srt/speculative/dflash_worker.py): proposed = verify count x (B - 1), and
  num_steps says nothing about the depth. NEXTN is rewritten to EAGLE at startup ("NEXTN shares
  the same implementation of EAGLE", python/sglang/srt/server_args.py) and a DeepSeek-style
  target's draft path defaults to the model path, so an MTP server's `/server_info` says
  `speculative_algorithm: "EAGLE"` with `speculative_draft_model_path` equal to `model_path`.
  SGLang does not serve P-EAGLE (no parallel drafting algorithm): the fake refuses it.
"""

from __future__ import annotations

from typing import Any

from eagle3kit.decode import Sampling, speculative_generate
from eagle3kit.methods.lookup.decode import lookup_generate
from eagle3kit.methods.mtp.decode import mtp_generate

METHODS = ("eagle3", "peagle", "dflash", "mtp", "ngram")


def method_of(drafter: Any) -> str | None:
    """The method a fake serves with `drafter` (None: plain decoding)."""
    if drafter is None:
        return None
    if drafter == "ngram":
        return "ngram"
    m = getattr(drafter, "method", None)
    if m in ("dflash", "mtp"):
        return m
    return "peagle" if getattr(drafter, "parallel", False) else "eagle3"


def check(method: str | None, engine: str) -> None:
    if method is not None and method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, found {method!r}")
    if method == "peagle" and engine == "sglang":
        raise ValueError("SGLang does not serve P-EAGLE (parallel drafting): use engine='vllm'")


def decode(eng, ids: list[int], max_tokens: int, temperature: float, eos, on_tokens):
    """One generation with the fake's drafter, batch 1 (a Generation with stats)."""
    kw = {"max_new_tokens": max_tokens, "eos_token_id": eos, "on_tokens": on_tokens}
    if eng.method == "ngram":
        return lookup_generate(eng.target, ids, num_output_tokens=eng.depth, **kw)
    kw.update(depth=eng.depth, sampling=Sampling(temperature))
    if eng.method == "mtp":
        return mtp_generate(eng.target, eng.drafter, ids, **kw)
    return speculative_generate(eng.target, eng.drafter, ids, **kw)  # eagle3, peagle, dflash


def vllm_config(eng) -> dict[str, Any]:
    """`speculative_config` as vLLM's dev-mode `/server_info` shows it."""
    m = eng.method
    spec: dict[str, Any] = {
        "method": "eagle3" if m == "peagle" else m,
        "model": {"ngram": None, "mtp": eng.name}.get(m, eng.draft_path),
        "num_speculative_tokens": eng.depth,
    }
    if m == "peagle":
        spec["parallel_drafting"] = True
    return spec


def sglang_args(eng) -> dict[str, Any]:
    """The speculative fields of SGLang's flat ServerArgs (`/server_info`)."""
    m, k = eng.method, eng.depth
    algo = {"ngram": "NGRAM", "dflash": "DFLASH", "mtp": "EAGLE"}.get(m, "EAGLE3")
    draft = {"ngram": None, "mtp": eng.name}.get(m, eng.draft_path)
    return {
        "speculative_algorithm": algo,
        "speculative_draft_model_path": draft,
        "speculative_num_steps": 1 if m == "dflash" else k,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": k + 1,
    }
