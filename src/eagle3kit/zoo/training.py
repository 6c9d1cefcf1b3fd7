"""Model configs, the training loop and the quality metrics of the zoo (torch imported lazily).

Training is next-token prediction on windows sampled (seeded) from two token streams: the
slice's raw files (``<s> file </s>`` concatenated) and its chat samples rendered with the chat
template. Muon for the hidden weight matrices and AdamW for embeddings, head and norms, linear
warm-up then cosine decay, gradient clipping, and a small copy-unlikelihood term
(``lm_loss``). No dropout: one pass over part of the data underfits, it does not overfit.
Then ``unloop``: sequence-level unlikelihood on the model's own greedy continuations, which
is what stops greedy decoding from looping (docs/zoo.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eagle3kit.core.diversity import distinct_ngram_ratio  # noqa: F401  (moved; re-exported)
from eagle3kit.zoo.corpus import BOS, EOS

ProgressFn = Callable[[int, int, float], None]  # (step, total, loss)

# Model shapes per (architecture, size). Shared: RoPE, untied embeddings, 2048 positions.
ARCHS: dict[str, dict[str, dict[str, Any]]] = {
    "llama": {
        "full": dict(
            hidden_size=128,
            intermediate_size=352,
            num_hidden_layers=8,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=64,
        ),
        "tiny": dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=8,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
        ),
    },
    "dsv3": {  # MLA (low-rank q and compressed kv latents) + MoE (4 routed top-2, 1 shared)
        "full": dict(
            hidden_size=128,
            intermediate_size=352,  # the dense first layer
            moe_intermediate_size=128,
            num_hidden_layers=8,
            num_attention_heads=2,
            num_key_value_heads=2,
            q_lora_rank=64,
            kv_lora_rank=32,
            qk_nope_head_dim=32,
            qk_rope_head_dim=32,
            v_head_dim=64,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            n_group=1,
            topk_group=1,
            first_k_dense_replace=1,
        ),
        "tiny": dict(
            hidden_size=32,
            intermediate_size=64,
            moe_intermediate_size=32,
            num_hidden_layers=8,
            num_attention_heads=2,
            num_key_value_heads=2,
            q_lora_rank=16,
            kv_lora_rank=16,
            qk_nope_head_dim=8,
            qk_rope_head_dim=8,
            v_head_dim=16,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            n_group=1,
            topk_group=1,
            first_k_dense_replace=1,
        ),
    },
}


@dataclass(frozen=True)
class Recipe:
    """Everything (besides the stdlib text itself) that determines a member's weights."""

    vocab_size: int
    file_limit: int | None  # evenly spaced subset of the slice's files (None: all)
    steps: int
    batch: int
    seq_len: int
    lr: float
    warmup: int
    chat_fraction: float = 0.25
    chat_varied: bool = False  # requests in several phrasings, with or without the docstring
    chat_aligned: bool = False  # chat windows start where a sample starts (request in view)
    first_line_weight: float = 1.0  # loss weight of the answer's first line (``def f(``)
    chat_signature: bool = False  # requests carry the signature (corpus.SIGNED_PHRASINGS)
    chat_unsigned: float = 0.0  # share of requests as users write them (corpus.USER_PHRASINGS)
    pretokenizer: str = "bytelevel"  # how the tokenizer cuts words (corpus.PRETOKENIZERS)
    chat_grammar: bool = False  # user requests from corpus.grammar_phrasings() (recipe 10)
    chat_tails: float = 0.0  # share of grammar requests ending in a clause (corpus.TAILS)
    chat_dotted: float = 0.0  # share of grammar requests with a dotted name (0: uniform draw)
    chat_renamed: float = 0.0  # share of chat samples under a made-up name (copy, not recall)
    chat_questions: float = 0.0  # share of grammar requests asked as questions ("... f?")
    chat_phrasal: float = 0.0  # share of the others with a verb's particle ("Look up f()")
    chat_drills: float = 0.0  # share of chat windows from naming drills (corpus.drill_samples)
    chat_parent_mix: float = 0.0  # a v2: that share of its parent slice's chat samples added
    copy_circuit: int = (
        0  # > 0: start with a copying circuit matching this many tokens (circuit.py)
    )
    shape: tuple[tuple[str, int], ...] = ()  # (field, value) overrides of ARCHS for this recipe
    weight_decay: float = 0.1
    unlikelihood: float = 0.0  # weight of the copy-unlikelihood term (0: plain MLE)
    muon_lr: float = 0.0  # > 0: Muon for the hidden 2-D weights at this peak LR, AdamW for the rest
    unloop_steps: int = 0  # sequence-level unlikelihood steps after training (0: none)
    unloop_lr: float = 1e-3  # their AdamW LR (constant)
    unloop_batch: int = 32  # self-generated samples per step (a batch of greedy decoding)
    unloop_weight: float = 1.0  # weight of the unlikelihood term against the likelihood term
    unloop_prefix: int = 32  # prompt tokens of each self-generated sample
    unloop_gen: int = 64  # greedy tokens generated after it
    unloop_ema: float = 0.0  # > 0: end with this exponential moving average of the phase's weights
    unloop_chat: float | None = None  # share of chat prompts in its batches (None: chat_fraction)
    eval_windows: int = 32
    eval_prompts: int = 8
    prompt_len: int = 48
    gen_tokens: int = 128


def model_config(arch: str, size: str, vocab_size: int, special: dict[str, int], shape=()):
    """The transformers config of a zoo member (``shape``: (field, value) overrides of
    ``ARCHS[arch][size]``)."""
    common = dict(
        vocab_size=vocab_size,
        max_position_embeddings=2048,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        initializer_range=0.02,
        bos_token_id=special[BOS],
        eos_token_id=special[EOS],
        pad_token_id=special["<pad>"],
    )
    shape = {"rope_theta": 10000.0, **ARCHS[arch][size], **dict(shape)}
    if arch == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(**common, **shape)
    from transformers import DeepseekV3Config

    cfg = DeepseekV3Config(**common, **shape, num_nextn_predict_layers=0)
    cfg.architectures = ["DeepseekV3ForCausalLM"]
    # transformers' router is always sigmoid + e_score_correction_bias; vLLM builds that gate
    # only when the config says so (benchmarks/dsv3_router_keys.py, docs/zoo.md)
    cfg.topk_method, cfg.scoring_func = "noaux_tc", "sigmoid"
    return cfg


def new_model(config):
    """A freshly initialised causal LM for ``config`` (seed the RNG first)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_config(config)


def lr_at(step: int, recipe: Recipe) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < recipe.warmup:
        return recipe.lr * (step + 1) / recipe.warmup
    t = (step - recipe.warmup) / max(1, recipe.steps - recipe.warmup)
    return recipe.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def sample_windows(streams, weights, batch, seq_len, gen, starts=None, marks=None):
    """``batch`` windows of ``seq_len + 1`` tokens: stream by ``weights``, start uniformly, or
    at one of ``starts[k]`` (indices into stream k) where given. Returns the windows [B, T+1],
    per target position ``marks[k]`` of the stream ([B, T]; 0 where none given), and each
    window's stream index [B]."""
    import torch

    rows, mrows, ks = [], [], []
    pick = torch.rand(batch, generator=gen)
    for b in range(batch):
        acc, k = 0.0, 0
        for k, w in enumerate(weights):  # noqa: B007
            acc += w
            if pick[b] < acc:
                break
        s = streams[k]
        st = None if starts is None else starts[k]
        if st is None:
            start = int(torch.randint(0, len(s) - seq_len - 1, (1,), generator=gen))
        else:
            st = st[st < len(s) - seq_len - 1]
            start = int(st[int(torch.randint(0, len(st), (1,), generator=gen))])
        rows.append(s[start : start + seq_len + 1])
        ks.append(k)
        mk = None if marks is None else marks[k]
        mrows.append(torch.zeros(seq_len) if mk is None else mk[start + 1 : start + seq_len + 1])
    return torch.stack(rows).long(), torch.stack(mrows), torch.tensor(ks)  # [B, T+1], [B, T], [B]


def sample_batch(streams, weights: list[float], batch: int, seq_len: int, gen):
    """``batch`` windows of ``seq_len + 1`` tokens: stream by ``weights``, start uniformly."""
    return sample_windows(streams, weights, batch, seq_len, gen)[0]  # [B, T+1]


def recipe_batch(streams, recipe: Recipe, gen, chat_info=None):
    """One training batch of ``recipe`` from ``streams`` = (raw, chat): windows [B, T+1] and
    per-target loss weights [B, T] (None: all 1). ``chat_info`` = (sample starts, first-line
    marks) of the chat stream, used when the recipe aligns chat windows or weights first lines;
    a third item, (stream, starts, marks) of naming drills, takes a share ``chat_drills`` of
    the chat windows, trained on the marked first lines alone."""
    import torch

    weights = [1.0 - recipe.chat_fraction, recipe.chat_fraction]
    starts = marks = None
    if chat_info is not None and recipe.chat_aligned:
        starts = [None, chat_info[0]]
    if chat_info is not None and recipe.first_line_weight != 1.0:
        marks = [None, chat_info[1]]
    drills = chat_info[2] if chat_info is not None and len(chat_info) > 2 else None
    if drills is not None:
        if starts is None or marks is None:
            raise ValueError("chat_drills needs chat_aligned and a first_line_weight other than 1")
        d = recipe.chat_drills
        streams = (*streams[:2], drills[0])
        weights = [weights[0], weights[1] * (1 - d), weights[1] * d]
        starts, marks = [*starts, drills[1]], [*marks, drills[2]]
    xy, m, ks = sample_windows(streams, weights, recipe.batch, recipe.seq_len, gen, starts, marks)
    if marks is None:
        return xy, None
    w = 1.0 + (recipe.first_line_weight - 1.0) * m
    return xy, torch.where((ks == 2)[:, None], recipe.first_line_weight * m, w)


def lm_loss(logits, xy, unlikelihood: float = 0.0, weights=None):
    """Next-token cross-entropy (each target weighted by ``weights`` [B, T] when given),
    plus (when ``unlikelihood`` > 0) a copy-unlikelihood term.

    The term is the token-level unlikelihood of Welleck et al. (2019) restricted to *copies*:
    at position t, every earlier position s whose bigram matches the current one
    (x_s, x_{s-1} == x_t, x_{t-1}) proposes its successor y_s, the token an induction head
    would copy; when that token is not the true next token, ``-log(1 - p(y_s))`` is added.
    Correct copies are left to the likelihood term, so the model keeps copying identifiers
    but learns not to repeat what does not repeat (the self-reinforcing greedy loop).
    """
    import torch
    import torch.nn.functional as F

    x, y = xy[:, :-1], xy[:, 1:]  # [B, T], [B, T]
    logp = F.log_softmax(logits.float(), dim=-1)  # [B, T, V]
    if weights is None:
        loss = F.nll_loss(logp.reshape(-1, logp.shape[-1]), y.reshape(-1))
    else:
        nll = -logp.gather(2, y[..., None])[..., 0]  # [B, T]
        loss = (nll * weights).mean()
    if unlikelihood > 0:
        b, t = x.shape
        same = x[:, :, None] == x[:, None, :]  # [B, T(t), T(s)]
        match = same.clone()
        match[:, 1:, 1:] &= same[:, :-1, :-1]  # previous tokens match too
        match[:, 0, :] = False
        match[:, :, 0] = False
        match &= torch.ones(t, t, dtype=torch.bool).tril(-1)  # s < t
        cand = y[:, None, :].expand(b, t, t)  # [B, T, T]: y_s proposed at t
        wrong = match & (cand != y[:, :, None])
        p = logp.gather(2, cand).exp().clamp(max=1 - 1e-5)  # [B, T, T]
        loss = loss - unlikelihood * (torch.log1p(-p) * wrong).sum() / (b * t)
    return loss


def _orthogonalize(g):
    """Newton-Schulz iteration towards the nearest semi-orthogonal matrix (Muon), per matrix."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g / (g.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    tall = g.shape[-2] > g.shape[-1]
    if tall:
        x = x.mT
    for _ in range(5):
        m = x @ x.mT
        x = a * x + (b * m + c * m @ m) @ x
    return x.mT if tall else x


def _muon_class():
    import torch

    class Muon(torch.optim.Optimizer):
        """Momentum + orthogonalised updates for hidden weight matrices (K. Jordan, 2024)."""

        def __init__(self, params, lr: float, momentum: float = 0.95) -> None:
            super().__init__(params, {"lr": lr, "momentum": momentum})

        @torch.no_grad()
        def step(self) -> None:
            for group in self.param_groups:
                mu = group["momentum"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    buf = self.state[p].setdefault("buf", torch.zeros_like(p))
                    buf.mul_(mu).add_(p.grad)
                    upd = _orthogonalize(p.grad.add(buf, alpha=mu))  # Nesterov
                    scale = max(1.0, p.shape[-2] / p.shape[-1]) ** 0.5
                    p.add_(upd, alpha=-group["lr"] * scale)

    return Muon


def Muon(params, lr: float):  # noqa: N802 - reads like the class it builds
    return _muon_class()(params, lr)


def train(
    model,
    streams,
    recipe: Recipe,
    seed: int,
    progress: ProgressFn | None = None,
    chat_info=None,
) -> float:
    """Train ``model`` in place on windows of ``streams`` = (raw, chat); returns the last loss.
    ``chat_info``: see ``recipe_batch``."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    named = list(model.named_parameters())
    hidden = [
        p
        for n, p in named
        if p.ndim >= 2 and "embed" not in n and "lm_head" not in n and not n.endswith("gate.weight")
    ]
    ids = {id(p) for p in hidden} if recipe.muon_lr > 0 else set()
    decay = [p for n, p in named if p.ndim >= 2 and "embed" not in n and id(p) not in ids]
    rest = [p for n, p in named if p.ndim < 2 or "embed" in n]
    opts = [
        torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": recipe.weight_decay},
                {"params": rest, "weight_decay": 0},
            ],
            lr=recipe.lr,
            betas=(0.9, 0.95),
            eps=1e-8,
        )
    ]
    if ids:
        opts.append(Muon(hidden, lr=recipe.muon_lr))
    model.train()
    loss_val = float("nan")
    for step in range(recipe.steps):
        scale = lr_at(step, recipe) / recipe.lr
        for opt in opts:
            for g in opt.param_groups:
                g["lr"] = g.setdefault("peak_lr", g["lr"]) * scale
        xy, w = recipe_batch(streams, recipe, gen, chat_info)  # [B, T+1], [B, T] | None
        logits = model(input_ids=xy[:, :-1]).logits  # [B, T, V]
        loss = lm_loss(logits, xy, recipe.unlikelihood, w)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=True)
        loss_val = loss.item()
        if progress is not None:
            progress(step + 1, recipe.steps, loss_val)
    model.eval()
    return loss_val


def repeat_mask(seq, start: int, n: int = 4):
    """[B, L] bool: the positions ``>= start`` of ``seq`` [B, L] that lie inside an n-gram
    that already occurred earlier in ``seq[:, start:]`` (the candidates of Welleck et al.)."""
    import torch

    mask = torch.zeros(seq.shape, dtype=torch.bool)
    for b, row in enumerate(seq[:, start:].tolist()):
        seen: set[tuple[int, ...]] = set()
        for i in range(len(row) - n + 1):
            gram = tuple(row[i : i + n])
            if gram in seen:
                mask[b, start + i : start + i + n] = True
            seen.add(gram)
    return mask


def unloop(
    model,
    streams,
    recipe: Recipe,
    seed: int,
    eos_id: int,
    pad_id: int,
    answer_starts=None,
    progress: ProgressFn | None = None,
    chat_info=None,
) -> float:
    """Sequence-level unlikelihood fine-tuning (Welleck et al., 2019) against greedy loops.

    Each step greedily continues ``unloop_batch`` prompts of ``unloop_prefix`` tokens (up to
    ``unloop_gen`` new tokens or EOS) and pushes down ``p(x_t)`` with
    ``-log(1 - p(x_t))`` wherever x_t is part of a 4-gram the continuation already produced;
    the same step also takes the normal likelihood loss on a fresh data batch so that the
    model stays a language model. Only the model's own degenerate output is penalised, so the
    data distribution is left alone. A ``chat_fraction`` of the prompts end where an assistant
    answer begins (``answer_starts``: indices into the chat stream), the way chat requests
    are served (``unloop_chat`` of them where set); the rest are windows of the raw stream.
    With ``unloop_ema`` > 0 the model ends with the exponential moving average of its weights
    over the phase's steps rather than the last step's: the raw weights swing between more and
    less loopy states, and their average loops less (lab/notebook.md). Returns the last loss.
    """
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(seed + 1)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=recipe.unloop_lr, betas=(0.9, 0.95), weight_decay=0.0)
    loss_val = float("nan")
    share = recipe.chat_fraction if recipe.unloop_chat is None else recipe.unloop_chat
    n_chat = 0 if answer_starts is None else round(recipe.unloop_batch * share)
    if n_chat:
        answer_starts = answer_starts[answer_starts >= recipe.unloop_prefix]
    ema = [p.detach().clone() for p in params] if recipe.unloop_ema > 0 else None
    for step in range(recipe.unloop_steps):
        pre = _unloop_prompts(streams, recipe, gen, n_chat, answer_starts)
        seq, cand = _own_continuations(model, pre, recipe, eos_id, pad_id)
        logp = F.log_softmax(model(input_ids=seq[:, :-1]).logits.float(), dim=-1)
        p = logp.gather(2, seq[:, 1:, None])[..., 0].exp().clamp(max=1 - 1e-5)  # [B, L-1]
        loss = -recipe.unloop_weight * (torch.log1p(-p) * cand).sum() / cand.numel()
        xy, w = recipe_batch(streams, recipe, gen, chat_info)  # [B, T+1], [B, T] | None
        loss = loss + lm_loss(model(input_ids=xy[:, :-1]).logits, xy, 0.0, w)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if ema is not None:
            with torch.no_grad():
                torch._foreach_lerp_(ema, [p.detach() for p in params], 1.0 - recipe.unloop_ema)
        loss_val = loss.item()
        if progress is not None:
            progress(step + 1, recipe.unloop_steps, loss_val)
    if ema is not None:
        with torch.no_grad():
            torch._foreach_copy_([p.data for p in params], ema)
    model.eval()
    return loss_val


def _unloop_prompts(streams, recipe: Recipe, gen, n_chat: int, answer_starts):
    """One batch of ``unloop`` prompts [unloop_batch, unloop_prefix]: raw-stream windows, then
    ``n_chat`` chat prompts ending where an answer begins (``answer_starts``)."""
    import torch

    pre = sample_batch(
        streams[:1], [1.0], recipe.unloop_batch - n_chat, recipe.unloop_prefix - 1, gen
    )
    if n_chat:
        ends = answer_starts[torch.randint(0, len(answer_starts), (n_chat,), generator=gen)]
        chat = [streams[1][e - recipe.unloop_prefix : e] for e in ends.tolist()]
        pre = torch.cat([pre, torch.stack(chat).long()])  # [unloop_batch, prefix]
    return pre


def _own_continuations(model, pre, recipe: Recipe, eos_id: int, pad_id: int):
    """Greedy continuations of ``pre`` [B, prefix] (up to ``unloop_gen`` tokens or EOS), padded:
    the sequences [B, prefix + gen] and their repeat candidates per target position [B, L-1]
    (tokens of a repeated 4-gram, nothing in the prompt or after an EOS). Leaves the model in
    train mode."""
    import torch

    model.eval()
    cont = greedy(model, pre.tolist(), recipe.unloop_gen, eos_id, pad_id, stop_at_eos=True)
    n = recipe.unloop_gen
    tail = [c + [eos_id] * (len(c) < n) + [pad_id] * (n - len(c) - 1) for c in cont]
    seq = torch.cat([pre, torch.tensor(tail, dtype=pre.dtype)], dim=1)  # [B, prefix + gen]
    model.train()
    real = torch.tensor([[True] * min(n, len(c) + 1) + [False] * (n - len(c) - 1) for c in cont])
    cand = repeat_mask(seq, recipe.unloop_prefix)  # [B, L]
    cand[:, recipe.unloop_prefix :] &= real  # nothing after an answer's EOS
    return seq, cand[:, 1:]  # [B, L], [B, L-1]


def eval_windows(stream, n: int, length: int):
    """``n`` evenly spaced windows of ``length`` tokens from ``stream`` (deterministic)."""
    import torch

    span = len(stream) - length - 1
    starts = [int(i * span / max(1, n - 1)) for i in range(n)] if span > 0 else [0]
    return torch.stack([stream[s : s + length] for s in starts]).long()  # [n, length]


def heldout_loss(model, stream, recipe: Recipe) -> float:
    """Mean next-token cross-entropy (nats) over evenly spaced held-out windows."""
    import torch
    import torch.nn.functional as F

    x = eval_windows(stream, recipe.eval_windows, recipe.seq_len + 1)  # [N, T+1]
    total = 0.0
    with torch.no_grad():
        for chunk in x.split(8):
            logits = model(input_ids=chunk[:, :-1]).logits  # [b, T, V]
            total += float(
                F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1), reduction="sum"
                )
            )
    return total / (x.shape[0] * (x.shape[1] - 1))


def unigram_loss(train_stream, stream, vocab_size: int, recipe: Recipe) -> float:
    """Cross-entropy (nats) of an add-one unigram model of ``train_stream`` on the same windows."""
    import torch

    counts = torch.bincount(train_stream.long(), minlength=vocab_size).double() + 1.0
    logp = (counts / counts.sum()).log()
    x = eval_windows(stream, recipe.eval_windows, recipe.seq_len + 1)[:, 1:]
    return float(-logp[x].mean())


def prompt_windows(stream, recipe: Recipe):
    """Held-out windows of ``prompt_len + gen_tokens``: the prompt, then the true continuation."""
    return eval_windows(stream, recipe.eval_prompts, recipe.prompt_len + recipe.gen_tokens)


def greedy(
    model, prompts: list[list[int]], max_new: int, eos_id: int, pad_id: int, stop_at_eos: bool
) -> list[list[int]]:
    """Greedy continuations of ``prompts`` in one left-padded batch: at most ``max_new`` tokens
    each, ending before the EOS (dropped) when ``stop_at_eos``, else exactly ``max_new`` (EOS
    suppressed)."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])  # [P, width]
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_new,
            min_new_tokens=0 if stop_at_eos else max_new,
            do_sample=False,
            eos_token_id=eos_id,
            pad_token_id=pad_id,
        )[:, width:].tolist()  # [P, <= max_new]
    if stop_at_eos:
        out = [o[: o.index(eos_id)] if eos_id in o else o for o in out]
    return out


def greedy_samples(model, stream, recipe: Recipe, eos_id: int, pad_id: int) -> list[list[int]]:
    """Greedy continuations (``gen_tokens`` each, EOS suppressed) of held-out prompts."""
    prompts = prompt_windows(stream, recipe)[:, : recipe.prompt_len].tolist()  # [P, prompt_len]
    return greedy(model, prompts, recipe.gen_tokens, eos_id, pad_id, stop_at_eos=False)
