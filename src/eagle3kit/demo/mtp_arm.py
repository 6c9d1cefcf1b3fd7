"""The demo's MTP row (issue 36, "MTP where the member has one"): dsv3-v2's own MTP head, the
layer the package ships with the member (`model.layers.{L}`, `num_nextn_predict_layers: 1`;
docs/zoo.md), used with no training: evaluated offline on the held-out batch the drafters
are measured on and benched on the same prompts, drafting `depth` tokens per cycle by
running the one head recursively (docs/mtp.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eagle3kit.methods.mtp.model import MTPHead
    from eagle3kit.model.target import TargetModel

LABEL = "MTP (shipped head)"


def shipped_head(v2: TargetModel) -> MTPHead | None:
    """The target's own MTP head, or None when its config declares none."""
    from eagle3kit.methods.mtp.checkpoint.layout import mtp_count
    from eagle3kit.methods.mtp.model import load_mtp_head

    if not mtp_count(v2.config):
        return None
    return load_mtp_head(v2)


def eval_mtp(v2: TargetModel, head: MTPHead, samples: Any, depth: int) -> dict[str, Any]:
    """The eval.json entry of the head on the probe batch the drafters were measured on
    (methods/mtp/measure/offline.py); `walk_acc` is its walked P(r >= i), as theirs."""
    from eagle3kit.demo.steps import eval_entry
    from eagle3kit.methods.mtp.measure.offline import evaluate_mtp_offline

    return eval_entry(evaluate_mtp_offline(v2, head, samples, depth), v2.name_or_path, "mtp")
