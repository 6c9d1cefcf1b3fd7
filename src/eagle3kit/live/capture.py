"""Feature stores from a running vLLM: `eagle3kit data capture --engine vllm`.

For targets no process of ours can load, the engine computes the hidden states. vLLM's
speculative method ``extract_hidden_states`` with the ``ExampleHiddenStatesConnector`` KV
connector (vLLM PR #33736) writes, per request, the residual stream at the layer ids it was
launched with (`live/capture_client.py` has the protocol). vLLM id k is the residual stream
after decoder layer k-1 (vLLM `EagleModelMixin._maybe_add_hidden_state`), i.e. our h-index k
(`eagle3kit.checkpoint.engines.rules`: vLLM's rule "as_is"); id L = num_hidden_layers is the last
layer's output *before* the final norm. We ask for the drafter's aux layers plus L:

    layer_ids = sorted(aux h-indices) + [L]

The aux columns of the store are the drafter's layers in the drafter's order; the teacher
comes from slot L through the target's final norm and lm_head (`live/heads.py`), read alone
from its safetensors. Everything else is `eagle3kit.data.store.capture` itself, through
:class:`EngineTarget` (a target whose forward asks the engine): the same manifest, shards,
fp8 aux with per-token scales, top-K teacher and resume after kill -9. The manifest's
``target.capture`` records the engine, the layer ids asked for and the h-indices held.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from array import array
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from eagle3kit.core.dtypes import NAME_BYTES, canonical
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.core.progress import Progress
from eagle3kit.live import capture_client as C
from eagle3kit.live.heads import OutputHead, TargetShape, target_shape
from eagle3kit.model.protocols import JsonConfig

CONNECTOR = "ExampleHiddenStatesConnector"
# The engine's log-prob of its own greedy token at the last position, against ours from the
# slot read as id L: equal up to the precision of the states' dtype, or that slot is another
# layer. Tolerances in nats: float32 1e-3; bf16/fp16 5e-2 (the engine's kernels round
# differently from ours in the final norm and lm_head).
LOGPROB_TOL = {torch.float32: 1e-3}
LOGPROB_TOL_LOW = 5e-2
SGLANG_REFUSAL = (
    "--engine sglang: SGLang returns only the final normed hidden state (return_hidden_states), "
    "or on an EAGLE-3 server the aux states without the last layer; no stock SGLang route "
    "writes aux layers and the pre-norm last layer per request. Use --engine vllm "
    "(docs/engine-capture.md)"
)


@dataclass(frozen=True)
class LayerPlan:
    """The vLLM layer ids to launch with and which file slot holds which h-index."""

    num_layers: int
    aux: tuple[int, ...]  # the h-indices the store holds: the drafter's, in its order, then extras
    layer_ids: tuple[int, ...]  # vLLM ids, ascending, the last one = num_layers
    drafter: tuple[int, ...] = ()  # the drafter's own h-indices (a prefix of aux; () = all)

    def aux_slots(self) -> list[int]:
        return [self.layer_ids.index(a) for a in self.aux]

    def record(self) -> dict[str, Any]:
        return {
            "engine": "vllm",
            "route": "extract_hidden_states + " + CONNECTOR,
            "layer_ids": list(self.layer_ids),
            "h_indices": list(self.aux),
            "drafter_h_indices": list(self.drafter or self.aux),
            "teacher": f"id {self.num_layers} (pre-norm last layer) through final norm + lm_head",
        }


def layer_plan(
    aux: Any,
    num_layers: int,
    layer_ids: Any = None,
    *,
    family: str = "llama",
    version: tuple[int, ...] | None = None,
    drafter: Sequence[int] | None = None,  # the drafter's h-indices, when aux holds more
) -> LayerPlan:
    """vLLM ids for these aux h-indices (under the rule of the engine table,
    `checkpoint/engines/rules.py`, for this vLLM release and target family) plus L; ``layer_ids``
    (what a running server was launched with) must be exactly those."""
    from eagle3kit.checkpoint.engines import rules as E
    from eagle3kit.model.target import validate_aux_layers

    aux = validate_aux_layers(aux, num_layers)
    rule = E.capture_rule("vllm", version, family).capture
    ids = sorted(set(aux))  # as_is: id x captures h[x]
    drafter = tuple(int(i) for i in drafter) if drafter else aux
    if E.apply_rule(rule, ids) != ids:  # pragma: no cover - the table says as_is for vLLM
        raise Eagle3Error(f"vLLM's capture rule is {rule!r}; engine capture expects 'as_is'")
    want = (*ids, num_layers)
    if layer_ids is not None:
        got = tuple(int(i) for i in layer_ids)
        if sorted(got) != list(want):
            held = [i for i in sorted(got) if i != num_layers]
            last = "and the last layer" if num_layers in got else "without the last layer"
            reads = f"the drafter reads h{list(drafter)}" + (
                f", the store also holds h{[i for i in aux if i not in drafter]}"
                if set(aux) != set(drafter)
                else ""
            )
            raise bad(
                "--layer-ids",
                f"the server captures h{held} {last}; {reads} and the teacher needs id "
                f"{num_layers}: expected layer ids {list(want)}",
            )
    return LayerPlan(num_layers, aux, want, drafter)


def _drafter_spec(drafter: str) -> Any:
    """The drafter's spec by header: an EAGLE-3 DraftSpec, or its method's (a DFlashSpec's
    `aux_layers` are the h-indices its z-lab ids name: id + 1)."""
    from eagle3kit.checkpoint.eagle3.reader import drafter_header
    from eagle3kit.checkpoint.io.safetensors_io import load_checkpoint
    from eagle3kit.checkpoint.methods import method_header_of

    ckpt = load_checkpoint(drafter)
    head = method_header_of(ckpt)  # a drafter its method's part reads (DFlash, P-EAGLE)
    return head.spec if head is not None else drafter_header(ckpt).spec


def drafter_aux(drafter: str | None, aux_layers: Any, num_layers: int) -> tuple[int, ...]:
    """The drafter's aux h-indices: from its checkpoint (headers only), or given, or default;
    a drafter and --aux-layers that disagree are an error."""
    from eagle3kit.core.spec import default_aux_layers

    given = tuple(aux_layers) if aux_layers else None
    if drafter is None:
        return given or tuple(default_aux_layers(num_layers))
    spec = _drafter_spec(drafter)
    have = tuple(spec.aux_layers or default_aux_layers(num_layers))
    if given is not None and given != have:
        raise bad("--aux-layers", f"expected the drafter's h{list(have)}, found h{list(given)}")
    return have


def launch_command(target: str, plan: LayerPlan, shared_dir: str, dtype: str | None) -> str:
    """The `vllm serve` line that makes the engine write what `data capture` reads."""
    spec = {
        "method": "extract_hidden_states",
        "num_speculative_tokens": 1,
        "draft_model_config": {
            "hf_config": {"eagle_aux_hidden_state_layer_ids": list(plan.layer_ids)}
        },
    }
    kv = {
        "kv_connector": CONNECTOR,
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"shared_storage_path": str(shared_dir)},
    }
    parts = ["vllm", "serve", target]
    if dtype:
        parts += ["--dtype", dtype]
    parts += [
        "--speculative-config",
        json.dumps(spec, separators=(",", ":")),
        "--kv-transfer-config",
        json.dumps(kv, separators=(",", ":")),
        "--no-enable-chunked-prefill",
    ]
    return " ".join(shlex.quote(p) for p in parts)


@dataclass
class EngineOutput:
    logits: torch.Tensor  # [B, T, V]
    aux: torch.Tensor  # [B, T, k*H]


class EngineTarget:
    """A target for `compute_features` whose forward asks vLLM for the hidden states (a
    `RunningTarget`, model/protocols.py)."""

    def __init__(self, head: OutputHead, plan: LayerPlan, data: Any, opts: dict[str, Any]):
        self.head, self.plan, self.opts = head, plan, opts
        self.aux_layers = plan.aux
        self.num_layers = plan.num_layers
        self.hidden_size = head.shape.hidden_size
        dt = opts.get("dtype") or head.shape.dtype
        self.expect = C.Expect(plan.layer_ids, self.hidden_size, _torch_dtype(dt))
        self._data, self._ids, self._last = data, data.ids, -1
        self._names: dict[bytes, list[int]] = {}
        for i in range(len(data)):  # data index by token content: names and prefetch
            self._names.setdefault(_digest(data[i].input_ids.tolist()), []).append(i)
        self._ahead = max(1, int(opts.get("concurrency", 8)))
        self._pool = ThreadPoolExecutor(self._ahead)
        self._pending: dict[int, Future] = {}  # data index -> its request, sent ahead

    @property
    def config(self) -> JsonConfig:
        return JsonConfig(self.head.shape.config)

    @property
    def vocab_size(self) -> int:
        return self.head.vocab_size

    @property
    def device(self) -> torch.device:
        return self.head.device

    @property
    def dtype(self) -> torch.dtype:
        return self.head.lm_head.dtype

    def identity(self) -> dict[str, Any]:
        s: TargetShape = self.head.shape
        return {
            "name_or_path": s.source,
            "model_type": s.model_type,
            "num_layers": s.num_layers,
            "hidden_size": s.hidden_size,
            "vocab_size": self.vocab_size,
            "aux_layers": list(self.aux_layers),
            "aux_convention": "hf",
            "capture": self.plan.record(),
        }

    def _index(self, ids: list[int]) -> int | None:
        """The data index of this row: the first sample with these tokens after the last one."""
        cands = self._names.get(_digest(ids), [])
        i = next((j for j in cands if j > self._last), cands[0] if cands else None)
        if i is not None:
            self._last = i
        return i

    def _submit(self, i: int | None, ids: list[int]) -> Future:
        if i is not None and i in self._pending:
            return self._pending.pop(i)
        return self._pool.submit(self._one, "?" if i is None else self._ids[i], ids)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> EngineOutput:
        """One request per row, ``concurrency`` in flight: this batch's rows first, then the
        samples after it in data order (sent ahead, used by the next batches)."""
        B, T = input_ids.shape
        rows = [input_ids[b, : int(attention_mask[b].sum())].tolist() for b in range(B)]
        idx = [self._index(r) for r in rows]
        futures = [self._submit(i, r) for i, r in zip(idx, rows, strict=True)]
        nxt = max((i for i in idx if i is not None), default=len(self._data)) + 1
        for j in range(nxt, min(nxt + self._ahead, len(self._data))):
            if j not in self._pending:
                ids = self._data[j].input_ids.tolist()
                self._pending[j] = self._pool.submit(self._one, self._ids[j], ids)
        states = [f.result() for f in futures]
        names = ["?" if i is None else self._ids[i] for i in idx]
        k, H = len(self.aux_layers), self.hidden_size
        aux = torch.zeros(B, T, k * H, dtype=self.dtype, device=self.device)  # [B, T, k*H]
        logits = torch.zeros(B, T, self.vocab_size, dtype=self.dtype, device=self.device)
        slots = self.plan.aux_slots()
        for b, (hs, said) in enumerate(states):
            n = hs.shape[0]
            aux[b, :n] = hs[:, slots].reshape(n, k * H).to(aux)  # [T, k*H]
            logits[b, :n] = self.head.logits(hs[:, -1])  # [T, V]
            self._check_last(names[b], logits[b, n - 1], said, hs.dtype)
        return EngineOutput(logits, aux)

    def close(self) -> None:
        """Drop requests sent ahead and not used (a stopped capture)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pending.clear()

    def _one(self, sid: str, ids: list[int]) -> tuple[torch.Tensor, int | None]:
        o = self.opts
        resp = C.request_states(o["url"], o.get("model"), sid, ids, o["timeout"], o["retries"])
        path = C.states_path(resp, sid, ids, Path(o["states_dir"]))
        C.wait_unlocked(path, sid, o["lock_timeout"])
        hs = C.read_states(path, sid, ids, self.expect)
        C.remove_states(path)
        return hs, C.sampled_token(resp)

    def _check_last(self, sid: str, logits: torch.Tensor, said: tuple, dtype) -> None:
        """The engine sampled greedily from the same last state: its token's log-prob must be
        ours (LOGPROB_TOL), or the slot we read as id L is another layer."""
        tok, lp = said
        if tok is None or lp is None:
            return
        ours = float(torch.log_softmax(logits.float(), -1)[tok])
        tol = LOGPROB_TOL.get(dtype, LOGPROB_TOL_LOW)
        if abs(ours - float(lp)) > tol:
            raise C.CaptureError(
                f"sample {sid}: the engine gives its greedy token {tok} log-prob {lp:.4f}, "
                f"final norm + lm_head on the last slot {ours:.4f} (> {tol:g} apart): the "
                f"server's last layer id is not {self.num_layers}; relaunch with "
                "--launch-command's ids"
            )


def _digest(ids: list[int]) -> bytes:
    return hashlib.blake2b(array("q", ids).tobytes(), digest_size=16).digest()


def _engine_target(
    data: Any, ckpt: Any, plan: LayerPlan, states_dir: Any, dtype: Any, device: str, conn: dict
) -> EngineTarget:
    """The running target of an engine capture: the output head in the served dtype, the
    connection options `conn` (url, model, timeouts, retries, concurrency) and DATA."""
    from eagle3kit.data.prepared import load_prepared

    if not Path(states_dir).is_dir():
        raise bad(str(states_dir), "--states-dir: expected the connector's shared_storage_path")
    served = served_dtype(dtype, target_shape(ckpt).dtype)
    head = OutputHead(ckpt, device=device, dtype=served)
    opts = {**conn, "dtype": served, "states_dir": str(states_dir)}
    return EngineTarget(head, plan, load_prepared(data), opts)


def served_dtype(given: str | None, checkpoint: str | None) -> str | None:
    """The dtype the server runs and writes its states in: --dtype when given (bf16, float32
    ...), else the checkpoint's torch_dtype (vLLM's own default, `--dtype auto`)."""
    if given is None:
        return checkpoint
    name = canonical(given)
    if name is None:
        raise bad("--dtype", f"expected float32, bfloat16 or float16, found {given!r}")
    return name


def _torch_dtype(name: str | None) -> torch.dtype | None:
    return getattr(torch, name) if name in NAME_BYTES else None


def open_target(target: str) -> tuple[Any, TargetShape]:
    """The target's checkpoint description (config + headers; no weight read) and shape."""
    from eagle3kit.checkpoint.io.hub_files import open_target as open_checkpoint

    ckpt = open_checkpoint(target)  # partial: only the norm's and lm_head's shards are read
    return ckpt, target_shape(ckpt)


def capture_layers(
    drafter: str | None, aux_layers: Any, extra: Any, probe: bool, num_layers: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the drafter's h-indices, every h-index to capture): the drafter's first, then
    ``extra`` ones, then with ``probe`` the probe's candidate readings of the drafter's ids
    (h[X] and h[X+1], `measure.probe.aux_candidates`), each once: one store then serves
    `probe`, `train` and `eval`, each picking the layers it needs."""
    aux = drafter_aux(drafter, aux_layers, num_layers)
    more = [int(x) for x in extra or ()]
    if probe:
        from eagle3kit.measure.probe_aux import AuxIds, aux_candidates

        if drafter is not None:
            spec = _drafter_spec(drafter)
            if not hasattr(spec, "aux_layers_raw"):  # DFlash: its z-lab ids as written
                ids, layers = tuple(spec.target_layer_ids), tuple(spec.aux_layers)
                spec = AuxIds(aux_layers_raw=ids, aux_layers=layers)
        else:
            spec = AuxIds(aux_layers_raw=None, aux_layers=tuple(aux))
        more += [int(i) for c in aux_candidates(spec, num_layers) for i in c["layers"]]
    return aux, (*aux, *dict.fromkeys(i for i in more if i not in aux))


def plan_for(
    target: str,
    drafter: str | None,
    aux_layers: Any,
    layer_ids: Any,
    extra: Any = None,
    version: tuple[int, ...] | None = None,
    probe: bool = False,
) -> tuple[Any, LayerPlan]:
    """The target's checkpoint and the layer plan: the drafter's aux h-indices, then
    ``extra`` ones and (``probe``) the probe's candidates (`capture_layers`)."""
    from eagle3kit.checkpoint.engines.rules import target_family

    ckpt, shape = open_target(target)
    own, aux = capture_layers(drafter, aux_layers, extra, probe, shape.num_layers)
    fam = target_family(shape.config)
    plan = layer_plan(aux, shape.num_layers, layer_ids, family=fam, version=version, drafter=own)
    return ckpt, plan


def capture_from_engine(
    data: str | Path,
    target: str,
    out: str | Path,
    *,
    url: str,
    states_dir: str | Path,
    drafter: str | None = None,
    aux_layers: Any = None,
    layer_ids: Any = None,
    extra_layers: Any = None,
    probe_layers: bool = False,
    heldout_data: bool | None = None,
    version: tuple[int, ...] | None = None,
    model: str | None = None,
    vocab: str | Path | None = None,
    topk: int | None = 64,
    shard_tokens: int = 32768,
    batch_tokens: int = 4096,
    concurrency: int = 8,
    timeout: float = 300.0,
    lock_timeout: float = 60.0,
    retries: int = 2,
    device: str = "cpu",
    dtype: str | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """`data capture --engine vllm`: the feature store of DATA, hidden states from the engine.

    `dtype`: the server's --dtype (the states are checked to be in it), by default the
    checkpoint's. Layer ids are settled (and a mismatch refused) before any request is sent."""
    from eagle3kit.data.store import capture

    ckpt, plan = plan_for(
        target, drafter, aux_layers, layer_ids, extra_layers, version, probe_layers
    )
    conn = dict(url=url, model=model, timeout=timeout, lock_timeout=lock_timeout)
    conn |= dict(retries=retries, concurrency=concurrency)
    tm = _engine_target(data, ckpt, plan, states_dir, dtype, device, conn)
    try:
        res = capture(
            data,
            tm,
            out,
            vocab=vocab,
            topk=topk,
            shard_tokens=shard_tokens,
            batch_tokens=batch_tokens,
            heldout_data=heldout_data,
            drafter_layers=plan.drafter,
            progress=progress,
        )
    finally:
        tm.close()
    return {**res, "engine": plan.record()}
