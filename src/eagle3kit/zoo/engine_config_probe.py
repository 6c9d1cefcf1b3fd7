"""vLLM's own config code on each zoo member (run by `zoo verify` in the real engine's venv;
never imports eagle3kit).

    <vllm-venv>/bin/python engine_config_probe.py MEMBER_DIR...

Prints one JSON line per member: `EngineArgs(model=DIR).create_engine_config()` (what `vllm
serve DIR` runs first, vllm/engine/arg_utils.py) built or failed, the architecture vLLM resolved,
and for a DeepSeek-V3 member the router keys as vLLM's config reads them: the gate carries
`e_score_correction_bias` only when `topk_method == "noaux_tc"`
(vllm/model_executor/models/deepseek_v2.py), so a member whose weights hold that bias must say so.
"""

from __future__ import annotations

import json
import os
import struct
import sys

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def weight_names(folder: str) -> list[str]:
    with open(os.path.join(folder, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return [k for k in json.loads(f.read(n)) if k != "__metadata__"]


def probe(folder: str) -> dict:
    from vllm.engine.arg_utils import EngineArgs

    rec = {"dir": os.path.basename(folder.rstrip("/")), "ok": False, "error": None}
    try:
        args = EngineArgs(model=folder, skip_tokenizer_init=True, max_model_len=512)
        cfg = args.create_engine_config()
    except Exception as e:  # the engine's own refusal, whatever its type
        rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        return rec
    hf = cfg.model_config.hf_config
    rec["architecture"] = cfg.model_config.architecture
    rec["ok"] = True
    if getattr(hf, "model_type", None) == "deepseek_v3":
        topk = getattr(hf, "topk_method", None)
        rec["topk_method"], rec["scoring_func"] = topk, getattr(hf, "scoring_func", None)
        has_bias = any(n.endswith("gate.e_score_correction_bias") for n in weight_names(folder))
        if has_bias and topk != "noaux_tc":
            rec["ok"] = False
            rec["error"] = (
                f"topk_method {topk!r}: vLLM builds the gate without e_score_correction_bias, "
                "which the weights hold (KeyError at load); expected 'noaux_tc'"
            )
    return rec


def main() -> int:
    for folder in sys.argv[1:]:
        print(json.dumps(probe(folder)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
