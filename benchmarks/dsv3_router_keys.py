"""Give the shipped DeepSeek-V3 members' config.json the router keys real configs carry
(issue 46), leaving every other file, the weights included, byte for byte as shipped.

    python benchmarks/dsv3_router_keys.py            # rewrite config.json + zoo.json's entry
    python benchmarks/dsv3_router_keys.py --check    # exit 1 if a member lacks the keys

transformers' DeepSeek-V3 router always scores with a sigmoid and adds
`e_score_correction_bias` before the top-k (models/deepseek_v3/modeling_deepseek_v3.py
`DeepseekV3TopkRouter`), so our members were trained that way and their weights hold the bias.
vLLM instead decides from the config: the gate gets the bias parameter only when
`topk_method == "noaux_tc"`, and scores with `scoring_func` (default "softmax")
(vllm/model_executor/models/deepseek_v2.py `DeepseekV2MoE`). Without the keys real vLLM fails
to load them (`KeyError: 'layers.1.mlp.gate.e_score_correction_bias'`). The real DeepSeek-V3
and Kimi-K2 configs carry `"topk_method": "noaux_tc"` and `"scoring_func": "sigmoid"`: with
them vLLM computes what transformers computes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from eagle3kit.core.digest import sha256_file  # noqa: E402

SHIPPED = ROOT / "src" / "eagle3kit" / "zoo" / "shipped"
KEYS = {"topk_method": "noaux_tc", "scoring_func": "sigmoid"}


def members() -> list[Path]:
    out = []
    for d in sorted(SHIPPED.iterdir()):
        cfg = d / "config.json"
        if cfg.is_file() and json.loads(cfg.read_text()).get("model_type") == "deepseek_v3":
            out.append(d)
    return out


def fix(folder: Path) -> bool:
    cfg = folder / "config.json"
    doc = json.loads(cfg.read_text())
    if all(doc.get(k) == v for k, v in KEYS.items()):
        return False
    # transformers writes config.json with sorted keys and indent 2; so do we
    cfg.write_text(json.dumps({**doc, **KEYS}, indent=2, sort_keys=True) + "\n")
    man = folder / "zoo.json"
    mdoc = json.loads(man.read_text())
    mdoc["shipped"]["files"]["config.json"] = {
        "sha256": sha256_file(cfg),
        "bytes": cfg.stat().st_size,
    }
    man.write_text(json.dumps(mdoc, indent=2) + "\n")
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    missing = []
    for d in members():
        doc = json.loads((d / "config.json").read_text())
        if a.check:
            if not all(doc.get(k) == v for k, v in KEYS.items()):
                missing.append(d.name)
        elif fix(d):
            print(f"{d.name}: config.json gets {KEYS}")
    if missing:
        print("missing the router keys: " + ", ".join(missing))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
