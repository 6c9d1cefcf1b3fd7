"""SGLang's own code on one engine_check case (runs in the SGLang venv; never imports eagle3kit).

    <sglang-venv>/bin/python benchmarks/engine_check_sglang.py CASE [CASE ...]

CASE holds case.json, drafter/ and target/ (benchmarks/_engine_cases.py). One JSON record per
case is printed as a stdout line (the last line for one CASE; the interface of
benchmarks/engine_check.py). Stages, each SGLang's own code:

1. config: `prepare_server_args(ARGS)`, the parser `python -m sglang.launch_server ARGS` runs
   (sglang/srt/server_args.py), on the arguments of the launch command our convert printed;
   the result published as the scheduler process does (`runtime_context.publish`); then
   `ModelConfig.from_server_args` for the target and, with `is_draft_model=True`, for the
   drafter (configs/model_config.py: transformers' AutoConfig and the draft-architecture
   rewrites), and the aux ids by `resolve_spec_aux_hidden_state_config`
   (model_executor/model_runner_components/spec_aux_hidden_state.py), what the target's
   model runner reads from the draft config.
2. model_class: the draft class `get_model_architecture(draft ModelConfig)` resolves
   (model_loader/utils.py), built on the CPU by the loader's own `_initialize_model`
   (model_loader/loader.py) under the config's dtype.
3. load_weights: the class's own `load_weights` on the tensors SGLang's own loader reads from
   our file (`DefaultModelLoader._get_all_weights`). To trace where each tensor lands, every
   floating tensor is replaced by a constant (its index + 1, same shape and dtype) before it is
   handed over, and every parameter is first filled with NaN: a parameter still holding NaN
   was not filled; a file tensor whose constant appears in no parameter was not used. d2t is
   consumed when the class set `hot_token_id` from it (d2t + arange, llama_eagle3.py /
   kimi_k25_eagle3.py); t2d is skipped by both classes.
Captured layers: the target class's own `set_eagle3_layers_to_capture` (models/llama.py:
`[x + 1 for x in ids]`; models/deepseek_v2.py: `x + 1` only when the first id is 1; both
`[2, L//2, L-3]` without ids) is called on a stand-in for the target object (it only sets
`model.layers_to_capture`); the target's forward then captures, in layer order, the input of
every decoder layer i in `layers_to_capture` (llama.py LlamaModel.forward,
deepseek_v2.py DeepseekV2Model.forward: `capture... if i in self.layers_to_capture`), i.e.
h[i]: captured_h = sorted(layers_to_capture). The target itself is not built.
Parameters taken from the target: EAGLE-3 draft workers call `set_embed(target embedding)`
(speculative/eagle_worker_v2.py init_lm_head), which replaces the drafter's embed_tokens unless
target_hidden_size != hidden_size, and `set_embed_and_head` when the class set
`load_lm_head_from_target` (no draft_vocab_size in the config).

Shims (named in each record): a one-process gloo group for the tensor-parallel layers, and
`rotary_embedding.base._is_cpu = True`: the CUDA wheel's RotaryEmbedding otherwise imports a
CUDA/vLLM kernel at construction for head sizes outside {64, 128, 256, 512}; with the flag it
keeps the native path, as SGLang's CPU engine does (construction only, no forward runs).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import _engine_probe as common
from _engine_probe import first_line

os.environ.setdefault("SGLANG_LOGGING_LEVEL", "WARNING")
DIST: list[bool] = []  # the process group is made once per process
SHIMS: list[str] = []


def record(**kw) -> dict:
    return common.record("sglang", **kw)


def launch_args(case: dict, case_dir: Path) -> tuple[list[str], list[str]]:
    """The arguments after `python -m sglang.launch_server` in our launch command."""
    words = shlex.split(case.get("launch") or "")
    if words[:3] == ["python", "-m", "sglang.launch_server"]:
        return words[3:], []
    args = [
        "--model-path",
        str(case_dir / "target"),
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        str(case_dir / "drafter"),
    ]
    return args, [
        "launch command is not an SGLang one: served as `python -m sglang.launch_server "
        "--model-path TARGET --speculative-algorithm EAGLE3 --speculative-draft-model-path "
        "DRAFTER`"
    ]


DEVICE_SHIM = (
    "--device cuda appended to the launch arguments: they resolve as on the CUDA machine the "
    "command is for (SGLang's get_device() finds no accelerator here); modules are built on the "
    "CPU"
)


def shim_rope() -> None:
    import sglang.srt.layers.rotary_embedding.base as rope_base
    import sglang.srt.layers.rotary_embedding.rope_variant as rope_variant

    rope_base._is_cpu = True
    rope_variant.get_device = lambda *a, **k: "cpu"
    msgs = (
        "rotary_embedding.base._is_cpu = True (the native RoPE path of SGLang's CPU engine; the "
        "CUDA wheel would import a GPU kernel at construction)",
        "rotary_embedding.rope_variant.get_device -> 'cpu' (DeepseekScalingRotaryEmbedding, "
        "the yarn RoPE, asks for the accelerator to put its cos/sin cache on)",
    )
    SHIMS.extend(m for m in msgs if m not in SHIMS)


def configs(args: list[str]):
    """ServerArgs as launch_server parses them, published; the target and draft ModelConfigs."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.runtime_context import SpawnRanks, publish
    from sglang.srt.server_args import prepare_server_args

    sa = prepare_server_args([*args, "--device", "cuda"])
    publish(sa, role="scheduler", ranks=SpawnRanks(world_rank=0, gpu_id=0))
    target = ModelConfig.from_server_args(sa)
    draft = ModelConfig.from_server_args(
        sa, model_path=sa.speculative_draft_model_path, is_draft_model=True
    )
    return sa, target, draft


def aux_ids(sa, target):
    """The ids the target's model runner reads from the draft config (SGLang's own function)."""
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    algo = SpeculativeAlgorithm.from_string(sa.speculative_algorithm)
    cfg = resolve_spec_aux_hidden_state_config(
        server_args=sa, model_config=target, spec_algorithm=algo, is_draft_worker=False
    )
    ids = cfg.eagle_aux_hidden_state_layer_ids
    return (list(ids) if ids is not None else None), bool(cfg.eagle_use_aux_hidden_state)


def captured(target, ids) -> tuple[str, list[int]]:
    """(target class, h-indices it captures) by the target class's own method (docstring)."""
    from sglang.srt.model_loader.utils import get_model_architecture

    cls, arch = get_model_architecture(target)
    stand_in = SimpleNamespace(
        pp_group=SimpleNamespace(is_last_rank=True),
        config=target.hf_config,
        model=SimpleNamespace(layers_to_capture=[]),
        capture_aux_hidden_states=False,
    )
    cls.set_eagle3_layers_to_capture(stand_in, ids)
    return arch, sorted(int(i) for i in stand_in.model.layers_to_capture)


def capture_reading_holds(target) -> bool:
    """Whether the target module's forward still captures by `i in self.layers_to_capture`
    inside its decoder-layer loop (the reading captured_h rests on)."""
    import inspect

    from sglang.srt.model_loader.utils import get_model_architecture

    cls, _ = get_model_architecture(target)
    module = sys.modules[cls.__module__]
    for obj in vars(module).values():
        fwd = getattr(obj, "forward", None) if isinstance(obj, type) else None
        if fwd is None:
            continue
        try:
            src = inspect.getsource(fwd)
        except (OSError, TypeError):
            continue
        if "for i in range(" in src and "if i in self.layers_to_capture" in src:
            return True
    return False


def init_dist(sa) -> None:
    from sglang.srt.distributed.parallel_state import (
        init_distributed_environment,
        initialize_model_parallel,
    )
    from sglang.srt.layers.moe import initialize_moe_config

    initialize_moe_config()
    common.one_process_gloo(init_distributed_environment, "sglang_dist_")
    initialize_model_parallel()
    try:
        from sglang.srt.layers.dp_attention import initialize_dp_attention

        initialize_dp_attention(server_args=sa)
    except Exception:  # noqa: BLE001 - only DP attention (off here) needs it
        pass
    SHIMS.append("a one-process gloo group (world size 1) for the tensor-parallel layers")


def build(draft):
    import torch
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.model_loader.loader import _initialize_model, get_model_loader
    from sglang.srt.model_loader.utils import set_default_torch_dtype

    load_config = LoadConfig()
    loader = get_model_loader(load_config, draft)
    with set_default_torch_dtype(draft.dtype), torch.device("cpu"):
        model = _initialize_model(draft, load_config, None)
    return loader, model


def effective_flags(model) -> dict:
    import inspect

    inner = getattr(model, "model", model)
    module_src = inspect.getsource(sys.modules[type(model).__module__])
    return {
        # no attribute carries it: in effect only if the draft module reads the key at all
        # (0.5.23's llama_eagle3.py and kimi_k25_eagle3.py do not: the residual is the raw
        # hidden state)
        "norm_before_residual": bool(getattr(model.config, "norm_before_residual", False))
        and "norm_before_residual" in module_src,
        "norm_before_fc": getattr(inner, "input_norm", None) is not None,
        "fc_norm": getattr(inner, "fc_norm", None) is not None,
        "norm_output": bool(getattr(inner, "norm_output", False)),
    }


def load(loader, draft, model) -> dict:
    """Every parameter NaN, then the class's own load_weights on the traced stream (docstring)."""
    import torch

    for p in model.parameters():
        if p.dtype.is_floating_point:
            p.data.fill_(float("nan"))
    names: list[str] = []
    model.load_weights(common.traced(loader._get_all_weights(draft, model), names))
    seen, unfilled = set(), []
    for pname, p in model.named_parameters():
        if not p.dtype.is_floating_point:
            continue
        if torch.isnan(p).any():
            unfilled.append(pname)
        seen |= common.seen_marks(p, len(names))
    d2t_used = getattr(model, "hot_token_id", None) is not None
    consumed, unused = common.split_names(names, seen, d2t_used)
    return {
        "tensors_consumed": consumed,
        "tensors_unused": unused,
        "params_unfilled": sorted(unfilled),
    }


def from_target(model) -> list[str]:
    """The parameters the EAGLE-3 draft worker replaces with the target's (docstring)."""
    cfg = model.config
    th = getattr(cfg, "target_hidden_size", None)
    out = []
    if getattr(model, "load_lm_head_from_target", False):
        out += [
            n for n, _ in model.named_parameters() if "embed_tokens" in n or n.startswith("lm_head")
        ]
    elif not (th is not None and th != cfg.hidden_size):
        out += [n for n, _ in model.named_parameters() if "embed_tokens" in n]
    return sorted(set(out))


def vocab_map(model) -> str:
    import torch

    hot = getattr(model, "hot_token_id", None)
    if hot is None:
        return "none"
    same = torch.equal(hot.long(), torch.arange(hot.shape[0]))
    return "identity" if same else "d2t"


def probe(case_dir: Path) -> dict:
    import sglang

    text = (case_dir / "case.json").read_text()  # paths are written relative to CASES/
    case = json.loads(text.replace("CASES/", str(case_dir.parent) + "/"))
    args, notes = launch_args(case, case_dir)
    rec = record(version=sglang.__version__, notes=notes)
    if DEVICE_SHIM not in SHIMS:
        SHIMS.append(DEVICE_SHIM)
    shim_rope()
    try:
        sa, target, draft = configs(args)
        ids, use_aux = aux_ids(sa, target)
    except Exception as e:  # noqa: BLE001 - the engine's own refusal is the result
        rec.update(stage="config", error=first_line(e))
        return rec
    rec["architecture"] = draft.hf_config.architectures[0]
    rec["engine_layer_ids"] = ids
    if not use_aux:
        rec["notes"].append("eagle_config.use_aux_hidden_state is false: no aux states")
    try:
        rec["target_class"], rec["captured_h"] = captured(target, ids)
        if not capture_reading_holds(target):
            rec["notes"].append(
                "the target module's forward no longer captures by `i in "
                "self.layers_to_capture` in its layer loop: captured_h may be wrong"
            )
    except Exception as e:  # noqa: BLE001
        rec["notes"].append("target capture not read: " + first_line(e))
    if not DIST:
        init_dist(sa)
        DIST.append(True)
    try:
        loader, model = build(draft)
    except Exception as e:  # noqa: BLE001
        rec.update(stage="model_class", error=first_line(e))
        return rec
    rec["draft_class"] = type(model).__name__
    rec["flags_effective"] = effective_flags(model)
    lm_head = getattr(model, "lm_head", None)
    rec["draft_vocab_size"] = int(lm_head.weight.shape[0]) if lm_head is not None else None
    try:
        rec.update(load(loader, draft, model))
    except Exception as e:  # noqa: BLE001
        rec.update(stage="load_weights", error=first_line(e))
        return rec
    rec["params_from_target"] = from_target(model)
    rec["vocab_map"] = vocab_map(model)
    rec["outcome"] = "served"
    return rec


# benchmarks/engine_check.py passes several CASE dirs to a probe that says so here, and reads
# one record line per case (each carries "case"); one CASE prints one line, the last.
ENGINE_CHECK_BATCH = True


def finish(rec: dict, case_dir: Path) -> str:
    """The record line; paths as case.json writes them, relative to CASES/."""
    rec["shims"] = list(SHIMS)
    return json.dumps(rec).replace(str(case_dir.parent) + "/", "CASES/")


if __name__ == "__main__":
    sys.exit(common.main(probe, record, finish))
