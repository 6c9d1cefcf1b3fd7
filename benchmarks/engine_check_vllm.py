"""vLLM's own code on one engine_check case (runs in the vLLM venv; never imports eagle3kit).

    <vllm-venv>/bin/python benchmarks/engine_check_vllm.py CASE

CASE holds case.json, drafter/ and target/ (benchmarks/_engine_cases.py). The last stdout line
is one JSON record (the interface of benchmarks/engine_check.py). Stages, each vLLM's own code:

1. config: `EngineArgs(model=TARGET, speculative_config={...}).create_engine_config()`, which
   is what `vllm serve TARGET --speculative-config '{...}'` runs (vllm/engine/arg_utils.py);
   the speculative config comes from the launch command our convert printed.
2. model_class: the draft class vLLM resolved (`draft_model_config.architecture`), built on
   the CPU by the model loader's own `create_model` (model_executor/model_loader).
3. load_weights: the class's own `load_weights` on the tensors vLLM's own loader reads from
   our file (`DefaultModelLoader.get_all_weights`). To trace where each tensor lands, every
   floating tensor is replaced by a constant (its index + 1, same shape and dtype) before it is
   handed over, and every parameter is first filled with NaN (integers: a sentinel): a
   parameter still holding NaN was not filled; a file tensor whose constant appears nowhere
   was not used.
Window: `window_effective`, each attention layer's `sliding_window` in the built drafter
(None: full attention), for the cases with a sliding window.
Captured layers: the aux ids read by both model runners' own functions (V1:
`GPUModelRunner._get_eagle3_aux_layers_from_config`, V2:
`v1/worker/gpu/spec_decode/eagle/eagle3_utils.get_eagle3_aux_layers_from_config`), else the
target model's own `get_eagle3_default_aux_hidden_state_layers`; then the target model is built
and its own forward run with every decoder layer replaced by a stub whose output is the
constant k + 1 (layer k) and the embedding zeroed, so each captured state's value is its
h-index (h[k] = input of decoder layer k). `captured_h` is the default runner's reading on a
CUDA machine with Triton (0.33: V2; 0.21: V1; `default_runner`); `captured_h_v1` the V1 one.

Shims (named in the record): `VLLM_TARGET_DEVICE=cpu` (vLLM's own switch: the CUDA wheel on a
machine without a GPU), a one-process gloo group for the tensor-parallel layers.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import _engine_probe as common
from _engine_probe import first_line

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
DIST: list[bool] = []  # the process group is made once per process
SHIMS = ["VLLM_TARGET_DEVICE=cpu (the CUDA wheel's own CPU switch; no GPU here)"]
SENTINEL = -987654321
# parameters vLLM sets itself, never from a checkpoint of an unquantized model: the attention
# layer's KV-cache/quantization scales (vllm/model_executor/layers/attention)
SELF_INIT = re.compile(r"\.attn\._(k|v|q|prob)_scale$")


def record(**kw) -> dict:
    return common.record("vllm", **{"captured_h_v1": None, "shims": SHIMS, **kw})


def spec_config(case: dict, case_dir: Path) -> tuple[str, dict, list[str]]:
    """(target, speculative_config) from our launch command when it is a vLLM one."""
    notes = []
    words = shlex.split(case.get("launch") or "")
    if words[:2] == ["vllm", "serve"] and "--speculative-config" in words:
        target = words[2]
        spec = json.loads(words[words.index("--speculative-config") + 1])
    else:
        target = str(case_dir / "target")
        spec = {"method": "eagle3", "model": str(case_dir / "drafter"), "num_speculative_tokens": 3}
        notes.append(
            "launch command is not a vLLM one: served as `vllm serve TARGET "
            "--speculative-config {method: eagle3, model: DRAFTER}`"
        )
    return target, spec, notes


def engine_config(target: str, spec: dict):
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(
        model=target,
        speculative_config=spec,
        skip_tokenizer_init=True,
        enforce_eager=True,
        max_model_len=512,
    )
    return args.create_engine_config()


def v2_engine_config(target: str, spec: dict):
    """The config built again with Model Runner V2 (a method only V2 serves, e.g. DSpark):
    V2 is what 0.33 picks on a CUDA machine with Triton (`VllmConfig.use_v2_model_runner`);
    without Triton (this CPU) it falls back to V1 unless VLLM_USE_V2_MODEL_RUNNER=1."""
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    try:
        return engine_config(target, spec)
    finally:
        del os.environ["VLLM_USE_V2_MODEL_RUNNER"]


V2_SHIM = (
    "VLLM_USE_V2_MODEL_RUNNER=1 for this config (V1 refuses the method; V2 is the default on "
    "a CUDA machine with Triton)"
)


def init_dist(cfg) -> None:

    from vllm.config import set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    common.one_process_gloo(init_distributed_environment, "vllm_dist_")
    with set_current_vllm_config(cfg):
        initialize_model_parallel(1, 1)
    SHIMS.append("a one-process gloo group (world size 1) for the tensor-parallel layers")


def aux_ids(cfg) -> dict:
    """The ids each model runner's own function reads from the draft config."""
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import (
        get_eagle3_aux_layers_from_config,
    )
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    s = cfg.speculative_config
    v1 = GPUModelRunner._get_eagle3_aux_layers_from_config(SimpleNamespace(speculative_config=s))
    v2 = get_eagle3_aux_layers_from_config(s)
    return {"v1": list(v1) if v1 else None, "v2": list(v2) if v2 else None}


def default_runner() -> str:
    """The model runner vLLM picks on a CUDA machine with Triton when nothing opts out: V2
    where `VllmConfig.use_v2_model_runner` is a property (0.33: True unless
    VLLM_USE_V2_MODEL_RUNNER=0, no Triton or an unsupported feature), else the env default
    (0.21: VLLM_USE_V2_MODEL_RUNNER defaults to 0, V1)."""
    import vllm.envs as envs
    from vllm.config import VllmConfig

    if isinstance(getattr(VllmConfig, "use_v2_model_runner", None), property):
        return "v2"
    return "v2" if envs.VLLM_USE_V2_MODEL_RUNNER else "v1"


class ProbeError(RuntimeError):
    """The probe could not drive this vLLM release (an API it lacks): no verdict, not a refusal."""


def _creator(loader):
    """The loader's own model creation: `create_model` (0.33) or, before it existed, the
    `initialize_model` the loader calls (0.21, model_executor/model_loader/utils.py)."""
    if hasattr(loader, "create_model"):
        return loader.create_model
    try:
        from vllm.model_executor.model_loader.utils import initialize_model
    except ImportError as e:
        raise ProbeError(f"no model creation function in this vLLM: {e}") from e
    return initialize_model


def build(cfg, model_config):
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.utils.torch_utils import set_default_torch_dtype

    loader = get_model_loader(cfg.load_config)
    create = _creator(loader)
    with set_current_vllm_config(cfg), set_default_torch_dtype(model_config.dtype):
        with torch.device("cpu"):
            model = create(vllm_config=cfg, model_config=model_config)
    return loader, model


def captured(cfg, runs: dict) -> dict:
    """Build the target, set its aux layers as each runner does, run its own forward with stub
    layers (layer k outputs the constant k + 1): each aux state's value is its h-index."""
    import torch
    from torch import nn
    from vllm.config import set_current_vllm_config
    from vllm.forward_context import set_forward_context

    _, target = build(cfg, cfg.model_config)
    default = list(target.get_eagle3_default_aux_hidden_state_layers())
    inner = target.model

    class Stub(nn.Module):
        def __init__(self, k: int):
            super().__init__()
            self.k = k

        def forward(self, positions, hidden_states, residual=None, *a, **kw):
            out = torch.full_like(hidden_states, float(self.k + 1))
            return out, torch.zeros_like(hidden_states)

    for k in range(len(inner.layers)):
        inner.layers[k] = Stub(k)
    for p in inner.embed_tokens.parameters():
        p.data.zero_()
    tokens = torch.zeros(2, dtype=torch.long)
    out = {"default": default}
    for runner, layer_ids in runs.items():
        target.set_aux_hidden_state_layers(tuple(layer_ids or default))
        with torch.no_grad(), set_current_vllm_config(cfg), set_forward_context(None, cfg):
            res = inner(tokens, torch.arange(2), None, None)
        aux = res[1] if isinstance(res, tuple) else []
        out[runner] = [int(round(float(a.float().mean()))) for a in aux]
    return out


def method_facts(cfg) -> dict:
    """What vLLM made of a method's config: its `method`, the draft tokens, parallel
    drafting, and for DFlash-family drafters each layer's causality as its model resolves it
    (model_executor/models/qwen3_dflash.py `_dflash_layer_causal`)."""
    s = cfg.speculative_config
    out = {
        "method": s.method,
        "num_speculative_tokens": s.num_speculative_tokens,
        "parallel_drafting": bool(getattr(s, "parallel_drafting", False)),
    }
    if s.method in ("dflash", "dspark"):
        from vllm.model_executor.models.qwen3_dflash import _dflash_layer_causal

        hf = s.draft_model_config.hf_config
        out["layer_causal"] = [_dflash_layer_causal(hf, i) for i in range(hf.num_hidden_layers)]
    return out


def effective_flags(model) -> dict:
    inner = getattr(model, "model", model)
    layer = inner.layers[0] if hasattr(inner, "layers") and len(inner.layers) else None
    res = getattr(layer, "_residual_norm", None)
    return {
        "norm_before_residual": getattr(res, "__name__", "") == "_norm_before_residual",
        "norm_before_fc": bool(getattr(inner, "norm_before_fc", False))
        and getattr(inner, "input_norm", None) is not None,
        "fc_norm": getattr(inner, "fc_norm", None) is not None,
        "norm_output": bool(getattr(inner, "norm_output", False)),
    }


def attention_windows(model) -> list:
    """Each attention layer's sliding window as the built drafter holds it (vLLM's attention
    layers keep `sliding_window`, model_executor/layers/attention/attention.py; None: full)."""
    return [
        getattr(m, "sliding_window", None)
        for m in model.modules()
        if hasattr(m, "kv_cache") and hasattr(m, "impl")
    ]


def mark_params(model) -> None:
    import torch

    for p in model.parameters():
        if p.dtype.is_floating_point:
            p.data.fill_(float("nan"))
        elif p.dtype != torch.bool:
            p.data.fill_(SENTINEL)
    for b in model.buffers():  # no forward runs here: a buffer's values after the load came
        if b.dtype.is_floating_point:  # from the file (P-EAGLE's mask_hidden)
            b.fill_(float("nan"))


def load(loader, draft_config, model) -> dict:
    import torch

    mark_params(model)
    names: list[str] = []
    model.load_weights(common.traced(loader.get_all_weights(draft_config, model), names))
    seen, unfilled = set(), []
    for pname, p in model.named_parameters():
        if SELF_INIT.search(pname):
            continue
        if p.dtype.is_floating_point:
            if torch.isnan(p).any():
                unfilled.append(pname)
            seen |= common.seen_marks(p, len(names))
        elif p.dtype != torch.bool and (p == SENTINEL).any():
            unfilled.append(pname)
    for b in model.buffers():  # a tensor copied into a buffer (P-EAGLE's mask_hidden)
        if b.dtype.is_floating_point:
            seen |= common.seen_marks(b, len(names))
    from_target = []
    if hasattr(model, "has_own_embed_tokens") and not model.has_own_embed_tokens:
        from_target += [n for n, _ in model.named_parameters() if "embed_tokens" in n]
    if hasattr(model, "has_own_lm_head") and not model.has_own_lm_head:
        from_target += [n for n, _ in model.named_parameters() if n.startswith("lm_head")]
    d2t_used = getattr(model, "draft_id_to_target_id", None) is not None and not any(
        "draft_id_to_target_id" in u for u in unfilled
    )  # an integer map: consumed when its parameter was filled
    consumed, unused = common.split_names(names, seen, d2t_used)
    return {
        "tensors_consumed": consumed,
        "tensors_unused": unused,
        "params_unfilled": sorted(unfilled),
        "params_from_target": sorted(from_target),
    }


def direct_serve(drafter: str) -> str:
    """`vllm serve DRAFTER` on a speculators file: the config stage only."""
    from vllm.engine.arg_utils import EngineArgs

    try:
        EngineArgs(
            model=drafter, skip_tokenizer_init=True, enforce_eager=True, max_model_len=512
        ).create_engine_config()
        return "ok"
    except Exception as e:  # noqa: BLE001 - the engine's own refusal is the result
        return "refused: " + first_line(e)


def ensure_cpu_platform() -> None:
    """Releases without the VLLM_TARGET_DEVICE=cpu switch for the CUDA wheel (0.21) resolve
    no platform on a machine without a GPU: set vLLM's own CpuPlatform as the current one."""
    import vllm.platforms as P

    if P.current_platform.device_type:
        return
    from vllm.platforms.cpu import CpuPlatform

    P._current_platform = CpuPlatform()
    SHIMS.append("vllm.platforms current platform set to vLLM's own CpuPlatform (no GPU here)")
    if not P.current_platform.device_type:
        raise RuntimeError("no CPU platform: the engine check cannot run this vLLM here")


def probe(case_dir: Path) -> dict:
    import vllm

    ensure_cpu_platform()

    text = (case_dir / "case.json").read_text()  # paths are written relative to CASES/
    case = json.loads(text.replace("CASES/", str(case_dir.parent) + "/"))
    target, spec, notes = spec_config(case, case_dir)
    rec = record(version=vllm.__version__, notes=notes)
    try:
        cfg = engine_config(target, spec)
    except Exception as e:  # noqa: BLE001
        if "Model Runner V1 does not support" not in str(e):
            rec.update(stage="config", error=first_line(e))
            return rec
        rec["runner_forced"] = "v2"
        try:  # the runner a CUDA machine with Triton picks; this CPU has no Triton
            cfg = v2_engine_config(target, spec)
        except Exception as e2:  # noqa: BLE001
            rec.update(stage="config", error=first_line(e2))
            return rec
    s = cfg.speculative_config
    dmc = s.draft_model_config
    rec["architecture"] = dmc.architecture
    rec["method"] = method_facts(cfg)
    runner = rec["runner_default_cuda"] = default_runner()
    rec["runner_here"] = "v2" if getattr(cfg, "use_v2_model_runner", False) else "v1"
    ids = aux_ids(cfg)
    rec["engine_layer_ids"] = ids[runner]
    rec["engine_layer_ids_v1"] = ids["v1"]
    if not DIST:
        init_dist(cfg)
        DIST.append(True)
    try:
        cap = captured(cfg, {"v2": ids["v2"], "v1": ids["v1"]})
        rec["captured_h"], rec["captured_h_v1"] = cap[runner], cap["v1"]
        rec["target_default_ids"] = cap["default"]
    except ProbeError:
        raise
    except Exception as e:  # noqa: BLE001
        rec["notes"].append("target forward not run: " + first_line(e))
    try:
        loader, model = build(cfg, dmc)
    except ProbeError:
        raise
    except NotImplementedError as e:  # a kernel this CPU build lacks: no verdict on the file
        if "CPU" not in str(e):
            raise
        rec.update(outcome="not-run", stage="model_class", error=first_line(e))
        return rec
    except Exception as e:  # noqa: BLE001
        rec.update(stage="model_class", error=first_line(e))
        return rec
    rec["flags_effective"] = effective_flags(model)
    rec["window_effective"] = attention_windows(model)
    d2t = getattr(model, "draft_id_to_target_id", None)
    rec["draft_vocab_size"] = int(getattr(dmc.hf_config, "draft_vocab_size", 0) or 0) or None
    rec["vocab_map"] = "d2t" if d2t is not None else "identity"
    try:
        rec.update(load(loader, dmc, model))
    except Exception as e:  # noqa: BLE001
        rec.update(stage="load_weights", error=first_line(e))
        return rec
    rec["outcome"] = "served"
    if case.get("layout") == "vllm" and case.get("drafter_attention") == "mha":
        rec["direct_serve"] = direct_serve(str(case_dir / "drafter"))
    return rec


# benchmarks/engine_check.py passes several CASE dirs to a probe that says so here, and reads
# one record line per case (each carries "case"); one CASE prints one line, the last.
ENGINE_CHECK_BATCH = True


def finish(rec: dict, case_dir: Path) -> str:
    """The record line; no process group is made before a config refusal, so no gloo shim."""
    early = rec.get("stage") == "config"
    rec["shims"] = [x for x in SHIMS if not (early and "gloo" in x)]
    if rec.get("runner_forced"):
        rec["shims"].append(V2_SHIM)
    return json.dumps(rec)


if __name__ == "__main__":
    sys.exit(common.main(probe, record, finish))
