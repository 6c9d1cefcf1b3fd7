"""convert of a DSpark drafter between speculators' and SpecForge's layouts, byte for byte
(the steps every method shares are checkpoint/method_convert.py's): the tensors keep their
names and bytes; the config is rewritten, the source's kept under `eagle3kit.converted_from`
so converting back restores it exactly (docs/dspark.md "Convert").

- speculators -> specforge: the heads' fields move into `dflash_config` beside
  `projector_type: "dspark"`, the ids become z-lab's (aux - 1), `sample_from_anchor` is stated
  at the top (SGLang reads it there); refused for a reduced vocabulary (SpecForge and SGLang
  use the target's lm_head, markov_w2 over its vocabulary), and where SpecForge's reading of
  the layers' causality (is_causal, else sliding layers causal) cannot say the trained one.
- specforge -> speculators: the speculators config (heads top-level, `speculative_tokens` =
  the block's proposals).
"""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.io.raw_tensors import raw
from eagle3kit.checkpoint.method_convert import body as body_of
from eagle3kit.checkpoint.method_convert import restored, stash
from eagle3kit.checkpoint.methods import MethodHeader
from eagle3kit.core import registry
from eagle3kit.core.errors import bad
from eagle3kit.methods.dflash.checkpoint.layout import zlab_layer_from_speculators
from eagle3kit.methods.dspark.checkpoint.compat import engine_causality
from eagle3kit.methods.dspark.checkpoint.spec import LAYOUTS as DSPARK_LAYOUTS
from eagle3kit.methods.dspark.checkpoint.spec import DSparkSpec
from eagle3kit.methods.dspark.checkpoint.write import (
    layer_of_specforge,
    specforge_config,
    speculators_config,
)

LAYOUTS = DSPARK_LAYOUTS


def convert_to(
    head: MethodHeader,
    to: str,
    *,
    embed_from: str | None,
    verifier: str | None,
    dtype: str | None = None,
) -> tuple[dict[str, Any], list[Any], list[str]]:
    """(config, raw tensors, notes) of the drafter in layout `to` (it copies no target
    tensor: `embed_from` and `dtype` change nothing)."""
    spec: DSparkSpec = head.spec
    if embed_from is not None:
        raise bad("--embed-from", "a DSpark drafter borrows the target's embedding and head")
    tensors = [raw(i, c) for c, i in body_of(head).items()]
    if to == "specforge":
        return _to_specforge(head, spec), tensors, _notes(spec, to)
    base = restored(head.ckpt.config, "speculators")
    cfg = base or speculators_config(
        spec, verifier or spec.verifier, layer_of_specforge(head.ckpt.config)
    )
    if base is None:
        stash(cfg, "specforge", head.ckpt.config)
    return cfg, tensors, _notes(spec, to)


def _to_specforge(head: MethodHeader, spec: DSparkSpec) -> dict[str, Any]:
    where = head.ckpt.config_file
    if spec.has_vocab_map or any(
        n in head.names for n in ("lm_head.weight", "embed_tokens.weight")
    ):
        raise bad(
            where,
            f"draft_vocab_size {spec.draft_vocab_size} of {spec.vocab_size} (or an own "
            "lm_head/embed_tokens): SpecForge's layout and SGLang use the target's head",
        )
    base = restored(head.ckpt.config, "specforge")
    if base is not None:
        return base
    layer = zlab_layer_from_speculators(head.ckpt.config)
    target = spec.replace(layout="specforge")
    cfg = specforge_config(target, {**layer, "dflash_config": {}})
    runs = engine_causality(cfg, target)
    if runs != spec.causal:
        if any(spec.causal):
            raise bad(
                where,
                f"per-layer causality {list(spec.causal)}: SpecForge's config says it by "
                "is_causal or sliding layers only, which cannot state this one",
            )
        cfg["is_causal"] = False
    stash(cfg, "speculators", head.ckpt.config)
    return cfg


def _notes(spec: DSparkSpec, to: str) -> list[str]:
    if to == "specforge":
        return [
            f"dflash_config.target_layer_ids {list(spec.target_layer_ids)} = speculators ids "
            f"{list(spec.speculators_ids)} - 1; sample_from_anchor {spec.sample_from_anchor} "
            "stated (SGLang's default is true; SpecForge's own generate drafts B - 1)"
        ]
    return [f"aux_hidden_state_layer_ids {list(spec.speculators_ids)} = z-lab ids + 1"]


def launch_commands(spec: DSparkSpec, layout: str, draft: str, target: str | None) -> dict:
    """{engine: command} for the engine that reads this layout (vLLM: speculators'; SGLang:
    SpecForge's), at the block's proposals."""
    lines = registry.launch_lines("dspark", spec.num_proposals, target or "TARGET_MODEL", draft)
    engine = "vllm" if layout == "speculators" else "sglang"
    return {engine: lines[engine]} if lines[engine] else {}
