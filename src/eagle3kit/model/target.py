"""TargetModel: a Hugging Face causal LM that also hands out its hidden states at the aux layers.

Aux-layer convention (docs/formats.md "Notation: h-indices"): aux id ``i`` is Hugging Face
``output_hidden_states[i]``, the *input* of decoder layer ``i`` (id 0 is the embedding output).
They are captured by forward pre-hooks on the chosen decoder layers, so a forward never keeps
the hidden states of every layer. Valid ids are ``0 .. L-1``: HF ``output_hidden_states[L]`` is
the final *normed* output, the input of no decoder layer, and no engine captures it, so it is
refused rather than given a second meaning.

Incremental decoding keeps one KV cache (a transformers ``DynamicCache``; it works for Llama's
per-head K/V and DeepSeek-V3's compressed MLA latents alike): ``prefill`` a prompt, ``verify``
n tokens in one forward call, ``crop``/``rollback`` to the accepted prefix. Batch size 1 is the
main path there; the full-sequence ``forward`` takes any batch (right padding + attention_mask).
The model is frozen (eval mode, no grad); outputs are plain tensors that autograd may consume.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from eagle3kit.core import registry
from eagle3kit.core.dtypes import ALIASES, NAME_BYTES
from eagle3kit.core.environment import quiet_transformers
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.core.spec import default_aux_layers
from eagle3kit.model.completeness import ENGINE_ROUTE, check_loading_info, check_target_files

_DTYPES = {n: getattr(torch, n) for n in NAME_BYTES} | {
    a: getattr(torch, n) for a, n in ALIASES.items()
}


def drop_mtp_keys(info: dict[str, Any], config: Any) -> dict[str, Any]:
    """transformers' load account without the drafters the target ships among its unexpected
    keys (its own MTP layers: each checkpoint part's `target_prefixes`): transformers never
    loads them (an MTP head is read by its method's model part)."""
    prefixes = tuple(
        p
        for _, part in registry.parts("checkpoint")
        for p in getattr(part, "target_prefixes", lambda c: ())(config)
    )
    if not prefixes or not info.get("unexpected_keys"):
        return info
    keep = [k for k in info["unexpected_keys"] if not str(k).startswith(prefixes)]
    return {**info, "unexpected_keys": keep}


@dataclass
class TargetOutput:
    """One target forward: next-token logits and the concatenated aux hidden states."""

    logits: torch.Tensor  # [B, T, V]
    aux: torch.Tensor  # [B, T, k*H], k = len(aux_layers) (3 for EAGLE-3): [h_low, h_mid, h_high]


def validate_aux_layers(ids: Any, num_layers: int) -> tuple[int, ...]:
    """Check aux ids against an ``num_layers``-layer target; returns them as a tuple of ints."""
    try:
        ids = tuple(ids)
    except TypeError:
        raise Eagle3Error(f"aux layers: expected a sequence of ints, found {ids!r}") from None
    if not ids:
        raise Eagle3Error("aux layers: expected at least one layer id, found none")
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int):
            raise Eagle3Error(f"aux layers: expected ints, found {i!r} in {list(ids)}")
        if not 0 <= i < num_layers:
            raise Eagle3Error(
                f"aux layer {i} is out of range: valid ids are 0..{num_layers - 1} for this "
                f"{num_layers}-layer target "
                "(id i = HF output_hidden_states[i] = input of decoder layer i)"
            )
    return ids


def _decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder-layer list of a transformers causal LM (Llama, DeepSeek-V3, Qwen, GPT-2 ...)."""
    base = model.get_decoder() if hasattr(model, "get_decoder") else None
    for owner in (base, getattr(model, "model", None), getattr(model, "transformer", None)):
        for attr in ("layers", "h", "blocks"):
            layers = getattr(owner, attr, None) if owner is not None else None
            if isinstance(layers, torch.nn.ModuleList) and len(layers) > 0:
                return layers
    raise Eagle3Error(f"{type(model).__name__}: cannot find its decoder layers (model.layers)")


def parse_dtype(dtype: torch.dtype | str) -> torch.dtype | str:
    """A torch dtype from its name (float32/fp32, bfloat16/bf16, float16/fp16) or "auto"."""
    if isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    if dtype not in _DTYPES:
        raise Eagle3Error(f"dtype: expected one of {sorted(_DTYPES)} or 'auto', found {dtype!r}")
    return _DTYPES[dtype]


# transformers' account of the load, refused below on any problem (not raised by it, not
# logged by it): missing, unexpected and wrong-shape keys (model/completeness.py).
_ACCOUNT = {"output_loading_info": True, "ignore_mismatched_sizes": True}


class TargetModel:
    """A frozen causal LM plus aux hidden-state capture and a rollback-able KV cache."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any = None,
        *,
        aux_layers: tuple[int, ...] | list[int] | None = None,
        name_or_path: str | None = None,
    ) -> None:
        self.model = model.eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.name_or_path = name_or_path or getattr(model.config, "_name_or_path", None)
        self.layers = _decoder_layers(model)
        self.num_layers = len(self.layers)
        if aux_layers is None:
            aux_layers = default_aux_layers(self.num_layers)
        self.aux_layers = validate_aux_layers(aux_layers, self.num_layers)
        self._captured: dict[int, torch.Tensor] | None = None
        self._hooks = [
            self.layers[i].register_forward_pre_hook(self._capture_hook(i), with_kwargs=True)
            for i in sorted(set(self.aux_layers))
        ]
        params = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self.cache: Any = None  # the DynamicCache of the incremental path

    @classmethod
    def from_pretrained(
        cls,
        path_or_id: str | Path,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | str = torch.float32,
        aux_layers: tuple[int, ...] | list[int] | None = None,
        trust_remote_code: bool = False,
        revision: str | None = None,
    ) -> TargetModel:
        """Load a local model dir or a hub id with ``AutoModelForCausalLM`` (and its tokenizer)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch_dtype = parse_dtype(dtype)
        src = str(path_or_id)
        local = Path(src).expanduser()
        if local.is_dir():
            if not (local / "config.json").is_file():
                raise Eagle3Error(f"{local}: not a model directory (no config.json)")
            pickles = sorted(f.name for f in local.glob("*") if f.suffix in (".bin", ".pt", ".pth"))
            if pickles and not any(local.glob("*.safetensors")):
                raise Eagle3Error(
                    f"{local}: only pickle weights ({', '.join(pickles[:3])}), which eagle3kit "
                    "never loads (unpickling runs code); convert them to safetensors"
                )
            src = str(local)
            check_target_files(local)  # a partial or slim target: refused before loading
        elif isinstance(path_or_id, Path) or src.startswith((".", "/", "~")):
            raise Eagle3Error(f"{src}: no such directory")
        kw = dict(trust_remote_code=trust_remote_code, revision=revision)
        try:
            with quiet_transformers():  # its "Loading weights" bar would leak into our output
                model, info = AutoModelForCausalLM.from_pretrained(  # info checked below
                    src, dtype=torch_dtype, use_safetensors=True, **_ACCOUNT, **kw
                )
        except OSError as e:
            raise Eagle3Error(f"{src}: cannot load the target model ({e})") from e
        except RuntimeError as e:  # its weight conversion failed (a fused tensor's part lost)
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise bad(
                src, f"transformers cannot assemble its weights ({first}); {ENGINE_ROUTE}"
            ) from e
        except ValueError as e:  # e.g. a model_type this transformers does not know
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise bad(
                f"{src}/config.json", f"expected a model transformers loads, found: {first}"
            ) from e
        # no weight initialised at random; its own MTP head is methods/mtp/model.py's to read
        check_loading_info(src, drop_mtp_keys(info, model.config))
        tokenizer = None
        if not local.is_dir() or any(
            (local / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")
        ):
            try:
                tokenizer = AutoTokenizer.from_pretrained(src, **kw)
            except (OSError, ValueError):
                tokenizer = None  # a model without a tokenizer still runs on ids
        model.to(device)
        return cls(model, tokenizer, aux_layers=aux_layers, name_or_path=src)

    # -- what later code needs -------------------------------------------------------------
    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def embed_tokens(self) -> torch.nn.Embedding:
        """The input embedding (drafters reuse it, frozen)."""
        return self.model.get_input_embeddings()

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def identity(self) -> dict[str, Any]:
        """What a feature store or report records about this target."""
        return {
            "name_or_path": self.name_or_path,
            "model_type": getattr(self.model.config, "model_type", None),
            "num_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "aux_layers": list(self.aux_layers),
            "aux_convention": "hf",
        }

    def close(self) -> None:
        """Remove the capture hooks (the wrapped model stays usable on its own)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self.cache = None

    # -- forward -------------------------------------------------------------------------
    def _capture_hook(self, i: int):
        def hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
            if self._captured is not None:
                self._captured[i] = args[0] if args else kwargs["hidden_states"]

        return hook

    def _run(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        cache: Any,
        position_ids: torch.Tensor | None = None,
    ):
        input_ids = torch.as_tensor(input_ids, device=self.device)
        if input_ids.ndim == 1:
            input_ids = input_ids[None]  # [1, T]
        kwargs: dict[str, Any] = {"input_ids": input_ids, "use_cache": cache is not None}
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask.to(self.device)
        if position_ids is not None:
            kwargs["position_ids"] = position_ids.to(self.device)
        if cache is not None:
            kwargs[self._cache_kwarg] = cache
        self._captured = {}
        try:
            with torch.no_grad():
                out = self.model(**kwargs)
            aux = torch.cat([self._captured[i] for i in self.aux_layers], dim=-1)  # [B, T, 3H]
        finally:
            self._captured = None
        return TargetOutput(logits=out.logits, aux=aux)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> TargetOutput:
        """Full-sequence forward without cache: ``input_ids`` [B, T] (or [T])."""
        return self._run(input_ids, attention_mask, None)

    __call__ = forward

    # -- incremental decoding with a KV cache ----------------------------------------------
    def _new_cache(self) -> Any:
        from transformers import DynamicCache

        try:
            return DynamicCache(config=self.model.config)
        except TypeError:  # transformers < 4.56
            return DynamicCache()

    @property
    def seq_len(self) -> int:
        """Tokens held in the KV cache (0 before ``prefill``)."""
        return 0 if self.cache is None else int(self.cache.get_seq_length())

    def reset(self) -> None:
        """Drop the KV cache."""
        self.cache = None

    def prefill(self, input_ids: torch.Tensor) -> TargetOutput:
        """Start a new sequence: run the prompt [B, T] into a fresh KV cache."""
        self.cache = self._new_cache()
        return self._run(input_ids, None, self.cache)

    def verify(self, tokens: torch.Tensor) -> TargetOutput:
        """Run ``n`` more tokens [B, n] (or [n]) in one forward; logits [B, n, V], aux [B, n, 3H].

        ``logits[:, j]`` is the target's prediction for the token after ``tokens[:, j]``. All
        ``n`` enter the cache: ``crop`` to the accepted prefix afterwards.
        """
        if self.cache is None:
            raise Eagle3Error("verify() needs a prefix: call prefill() first")
        return self._run(tokens, None, self.cache)

    def verify_tree(
        self, tokens: torch.Tensor, position_ids: torch.Tensor, tree_mask: torch.Tensor
    ) -> TargetOutput:
        """Run a token tree [1, n] in ONE forward: each token sees the whole cache, then only
        the tree tokens that ``tree_mask`` allows.

        ``tree_mask`` bool [n, n]: ``tree_mask[i, j]`` True when token i may attend to tree
        token j (its ancestors and itself). ``position_ids`` [1, n] give each token its depth
        in the sequence (siblings share one), so rotary embeddings see the path, not the
        flattened order. The 4D mask [1, 1, n, S] (S = cached + n) goes to the model as an
        additive float mask (0 = attend, dtype min = masked), which transformers passes
        through unchanged for every attention implementation. All n tokens enter the cache:
        ``keep`` the accepted path afterwards.
        """
        if self.cache is None:
            raise Eagle3Error("verify_tree() needs a prefix: call prefill() first")
        tokens = torch.as_tensor(tokens, device=self.device).reshape(1, -1)  # [1, n]
        n, past = tokens.shape[1], self.seq_len
        if tuple(tree_mask.shape) != (n, n):
            raise Eagle3Error(
                f"verify_tree: tree_mask must be [{n}, {n}], found {list(tree_mask.shape)}"
            )
        allowed = torch.ones(n, past + n, dtype=torch.bool, device=self.device)  # [n, S]
        allowed[:, past:] = tree_mask.to(self.device)
        mask = torch.zeros(1, 1, n, past + n, dtype=self.dtype, device=self.device)  # [1, 1, n, S]
        mask.masked_fill_(~allowed, torch.finfo(self.dtype).min)
        return self._run(tokens, mask, self.cache, position_ids.reshape(1, -1))

    def keep(self, positions: torch.Tensor | list[int]) -> None:
        """Keep only the cached positions ``positions`` (ascending), packed to 0..len-1.

        After a tree verify the accepted path is scattered over the cache (siblings of its
        nodes sit between them); this gathers every layer's keys and values along the
        sequence axis so the cache holds exactly the path, as if it had been decoded alone.
        Keys were rotated at their tree positions, which are the path's positions.
        """
        idx = torch.as_tensor(positions, dtype=torch.long, device=self.device)  # [n_keep]
        n = self.seq_len
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
            raise Eagle3Error(f"keep: positions must lie in 0..{n - 1}, found {idx.tolist()}")
        if idx.numel() > 1 and not bool((idx[1:] > idx[:-1]).all()):
            raise Eagle3Error(f"keep: positions must be strictly ascending, found {idx.tolist()}")
        if idx.numel() == n:
            return  # ascending, in range and n of them: already 0..n-1
        # only the suffix after the longest untouched prefix needs moving
        same = int((idx == torch.arange(idx.numel(), device=self.device)).cumprod(0).sum())
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                t = getattr(layer, name)  # [B, heads, n, d]
                moved = t.index_select(-2, idx[same:])  # [B, heads, n_keep - same, d]
                setattr(layer, name, torch.cat([t[..., :same, :], moved], dim=-2))

    def crop(self, length: int) -> None:
        """Keep only the first ``length`` cached tokens (the accepted prefix)."""
        n = self.seq_len
        if not 0 <= length <= n:
            raise Eagle3Error(f"crop: length {length} is out of range 0..{n} (tokens in the cache)")
        if length < n:
            self.cache.crop(length - n)  # a negative count removes that many tokens

    def rollback(self, n: int) -> None:
        """Drop the last ``n`` cached tokens (the rejected drafts)."""
        if n < 0 or n > self.seq_len:
            raise Eagle3Error(f"rollback: {n} is out of range 0..{self.seq_len}")
        self.crop(self.seq_len - n)
