"""Build one zoo member into a directory: data, tokenizer, training, evaluation, save."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eagle3kit.core import diversity
from eagle3kit.core.artifacts import stamp
from eagle3kit.core.atomic import atomic_write_json
from eagle3kit.core.environment import quiet_transformers
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.core.progress import Progress, emit
from eagle3kit.zoo import circuit
from eagle3kit.zoo import corpus as corpus
from eagle3kit.zoo import training as tr

if TYPE_CHECKING:
    from eagle3kit.zoo.members import Member

# What a member's answers to held-out chat requests should reach (issue 22): the first
# line names the requested function, distinct first lines, pooled distinct-4 over answers.
CHAT_BAR = {"names_function": 0.8, "distinct_openings": 0.8, "pooled_distinct4": 0.6}
# Naming drills per training function when a recipe sets ``chat_drills`` (round 9).
DRILL_VARIANTS = 3


class _Stages:
    """Times each build stage (``seconds``: stage name -> wall seconds, complete once closed)
    and reports it through the progress callback: one event stream per stage."""

    def __init__(self, progress: Progress | None, label: str) -> None:
        self.progress, self.label = progress, label
        self.seconds: dict[str, float] = {}
        self._stage: tuple[str, float] | None = None
        self._done: tuple[int, int] = (1, 1)

    def __enter__(self) -> _Stages:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close_stage()

    def _close_stage(self) -> None:
        if self._stage is not None:
            name, t = self._stage
            self.seconds[name] = round(time.time() - t, 1)
            self._stage = None
            emit(self.progress, f"{self.label}: {name}", *self._done)

    def stage(self, text: str) -> None:
        self._close_stage()
        self._stage, self._done = (text, time.time()), (1, 1)
        emit(self.progress, f"{self.label}: {text}", 0, None)

    def step(self, step: int, total: int, loss: float) -> None:
        if self._stage is not None:
            self._done = (total, total)
            emit(self.progress, f"{self.label}: {self._stage[0]}", step, total, "step", loss=loss)


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (all threads); wall time on a shared
    machine says little about a build's cost."""
    t = os.times()
    return t.user + t.system


@contextlib.contextmanager
def _deterministic(threads: int) -> Iterator[None]:
    """Fixed thread count, deterministic algorithms, a private RNG; all restored afterwards."""
    import torch
    from transformers.utils import logging as hf_logging

    old_threads, old_det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    old_bars = hf_logging.is_progress_bar_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    hf_logging.disable_progress_bar()  # our own bar says what is happening
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_det)
        if old_bars:
            hf_logging.enable_progress_bar()


def _stream(tok, texts: list[str], special: dict[str, int]):
    """``<s> text </s>`` for every text, concatenated: int32 [N]; special-token look-alikes
    inside the stdlib text stay plain text."""
    import torch

    tok.encode_special_tokens = True
    try:
        enc = tok.encode_batch(texts)
    finally:
        tok.encode_special_tokens = False
    ids: list[int] = []
    for e in enc:
        ids += [special[corpus.BOS], *e.ids, special[corpus.EOS]]
    return torch.tensor(ids, dtype=torch.int32)  # [N]


def _chat_stream(tok, convs: list[dict]):
    """Chat samples rendered with the chat template, concatenated: int32 [N]; the index of
    each sample's first token [S]; and a float32 [N] mark, 1 on the tokens of each answer's
    first line (``def f(...):``, the line that names the requested function), else 0."""
    import torch

    texts = [corpus.render_chat(c["messages"]) for c in convs]
    enc = tok.encode_batch(texts)
    ids: list[int] = []
    first: list[float] = []
    starts: list[int] = []
    head = corpus.ROLE_TOKENS[2] + "\n"
    for conv, text, e in zip(convs, texts, enc, strict=True):
        a = text.index(head) + len(head)
        b = a + len(conv["messages"][1]["content"].split("\n", 1)[0])  # not the end token
        starts.append(len(ids))
        ids += e.ids
        first += [float(a <= s < b) for s, _ in e.offsets]
    return (
        torch.tensor(ids, dtype=torch.int32),  # [N]
        torch.tensor(starts, dtype=torch.long),  # [S]
        torch.tensor(first, dtype=torch.float32),  # [N]
    )


def _chat_prompt(tok, conv: dict) -> list[int]:
    """The user turn of ``conv`` rendered with the chat template, plus the generation prompt."""
    text = corpus.render_chat(conv["messages"][:1]) + corpus.ROLE_TOKENS[2] + "\n"
    return tok.encode(text).ids


def names_function(answer: str, name: str) -> bool:
    """Whether the first line of ``answer`` defines ``name`` (``def name(``)."""
    first = answer.split("\n", 1)[0]
    return re.match(rf"\s*(async\s+)?def\s+{re.escape(name)}\s*\(", first) is not None


def chat_figures(answers: list[str], names: list[str], answer_ids: list[list[int]]) -> dict:
    """The conditioning figures of greedy ``answers`` (text and token ids) to requests for
    the functions ``names``: the share whose first line names the requested function, the
    share of distinct first lines, distinct answers, pooled distinct-4 over all answers."""
    n = len(answers)
    return {
        "requests": n,
        "names_function": round(sum(map(names_function, answers, names)) / n, 4),
        "distinct_openings": round(len({a.split("\n", 1)[0] for a in answers}) / n, 4),
        "distinct_answers": diversity.distinct_outputs(answer_ids),
        "pooled_distinct4": round(diversity.pooled_distinct(answer_ids, 4), 4),
    }


def chat_eval(model, tok, special, requests: list[dict], max_new: int) -> tuple[dict, list]:
    """Greedy answers (to EOS, at most ``max_new`` tokens) to ``requests``
    (``corpus.held_out_requests``): their ``chat_figures`` and the answers' token ids."""
    prompts = [_chat_prompt(tok, r) for r in requests]
    eos, pad = special[corpus.EOS], special[corpus.PAD]
    ids = tr.greedy(model, prompts, max_new, eos, pad, stop_at_eos=True)
    texts = [tok.decode(a) for a in ids]
    return chat_figures(texts, [r["name"] for r in requests], ids), ids


def below_chat_bar(figures: dict) -> list[str]:
    """The figures of ``figures`` under ``CHAT_BAR``, as "name value < bar" (empty: met)."""
    return [f"{k} {figures[k]:.2f} < {v}" for k, v in CHAT_BAR.items() if figures[k] < v]


def chat_bar_warning(label: str, figures: dict) -> str | None:
    """One line saying that member ``label``'s chat answers fall below ``CHAT_BAR`` and what
    that does to a τ measured on them (None: they meet it)."""
    low = below_chat_bar(figures)
    if not low:
        return None
    head = f"zoo member {label}: chat answers below the zoo's bar ({', '.join(low)} on "
    head += f"{figures['requests']} held-out requests): "
    if any(k.startswith(("names_function", "distinct_openings")) for k in low):
        return head + (
            "they do not depend on the request, so acceptance measured on them is partly "
            "memory of canned answers"
        )
    return head + (
        "they answer the request but repeat text within and across answers, which inflates "
        "acceptance measured on them"
    )


@dataclass
class _Data:
    """The token streams and samples one build trains and evaluates on."""

    train_files: list
    held: list
    convs: list
    raw: Any  # [N] training tokens
    chat: Any  # [M] chat-sample tokens
    chat_info: tuple  # ([S] sample starts in ``chat``, [M] first-line marks[, drills])
    held_raw: Any
    held_other_raw: Any
    requests: list  # held-out chat requests (corpus.held_out_requests)
    user_requests: list  # the same, phrased as users write them (corpus.HELD_OUT_PHRASINGS)


def _metrics(
    model, tok, special, recipe: tr.Recipe, d: _Data, other: str, last_loss: float
) -> dict[str, Any]:
    """Held-out losses and greedy-loop metrics of the trained model (zoo.json "metrics")."""
    vocab = model.config.vocab_size
    eos, pad = special[corpus.EOS], special[corpus.PAD]
    samples = tr.greedy_samples(model, d.held_raw, recipe, eos, pad)
    d4 = [tr.distinct_ngram_ratio(s) for s in samples]
    d4_other = [
        tr.distinct_ngram_ratio(s)
        for s in tr.greedy_samples(model, d.held_other_raw, recipe, eos, pad)
    ]
    figures, answers = chat_eval(model, tok, special, d.requests, recipe.gen_tokens)
    d4_chat = [tr.distinct_ngram_ratio(a) for a in answers]
    windows = tr.prompt_windows(d.held_raw, recipe)  # [P, prompt_len + gen_tokens]
    prompt = windows[0, : recipe.prompt_len].tolist()
    ref = [tr.distinct_ngram_ratio(w[recipe.prompt_len :].tolist()) for w in windows]
    metrics: dict[str, Any] = {
        "heldout_loss": round(tr.heldout_loss(model, d.held_raw, recipe), 4),
        "unigram_loss": round(tr.unigram_loss(d.raw, d.held_raw, vocab, recipe), 4),
        "heldout_loss_other_slice": round(tr.heldout_loss(model, d.held_other_raw, recipe), 4),
        "other_slice": other,
        "train_loss_last": round(last_loss, 4),
        "distinct4_mean": round(sum(d4) / len(d4), 4),
        "distinct4_min": round(min(d4), 4),
        "distinct4": [round(x, 4) for x in d4],
        "distinct4_reference": round(sum(ref) / len(ref), 4),  # the true continuations
        "distinct4_other_slice_mean": round(sum(d4_other) / len(d4_other), 4),
        "chat": {  # greedy answers (stop at EOS, at most gen_tokens) to held-out requests
            "prompts": len(answers),
            "distinct4_mean": round(sum(d4_chat) / len(d4_chat), 4),
            "distinct4_min": round(min(d4_chat), 4),
            "ended": round(sum(len(a) < recipe.gen_tokens for a in answers) / len(answers), 4),
            "mean_tokens": round(sum(map(len, answers)) / len(answers), 1),
            **figures,
            "sample": {
                "request": d.requests[0]["messages"][0]["content"],
                "answer": tok.decode(answers[0]),
            },
        },
        # the same figures for requests as users write them, no signature, in phrasings no
        # recipe trains on (the zoo bar of issue 33; benchmarks/zoo_bar.py)
        "chat_unsigned": chat_eval(model, tok, special, d.user_requests, recipe.gen_tokens)[0],
        "greedy_tokens": recipe.gen_tokens,
        "sample": {"prompt": tok.decode(prompt), "greedy": tok.decode(samples[0])},
    }
    return metrics


def _manifest(
    m: Member, label: str, size: str, recipe: tr.Recipe, model, d: _Data, metrics: dict[str, Any]
) -> dict[str, Any]:
    """zoo.json without the timing fields (the caller adds them)."""
    import torch
    import transformers

    from eagle3kit.zoo.members import BUILD_THREADS

    cfg = model.config
    doc = {
        "name": label,
        "member": m.name,
        "size": size,
        "architecture": type(model).__name__,
        "version": m.version,
        "parent": m.parent,
        "seed": m.seed,
        "data": {
            "source": "python stdlib",
            "stdlib": corpus.stdlib_name(),
            "slice": m.slice,
            "train_files": len(d.train_files),
            "heldout_files": len(d.held),
            "train_tokens": int(d.raw.numel()),
            "chat_samples": len(d.convs),
            "chat_tokens": int(d.chat.numel()),
        },
        "recipe": asdict(recipe),
        "tokens_seen": recipe.steps * recipe.batch * recipe.seq_len,
        "params": sum(p.numel() for p in model.parameters()),
        "num_layers": cfg.num_hidden_layers,
        "hidden_size": cfg.hidden_size,
        "vocab_size": cfg.vocab_size,
        "metrics": metrics,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": BUILD_THREADS[size],
    }
    return stamp(doc, "zoo_member")


def _prepare(m: Member, size: str, recipe: tr.Recipe, out: Path, parent_dir, bar: _Stages):
    """Read the slices, train (v1) or copy (v2) the tokenizer into ``out``, encode:
    (tokenizer, special-token ids, _Data)."""
    import tokenizers
    from transformers import AutoTokenizer

    other = "test" if m.slice == "lib" else "lib"
    held_limit = None if recipe.file_limit is None else max(2, recipe.file_limit // 10)
    bar.stage("reading the standard library")
    train_files = corpus.files(m.slice, limit=recipe.file_limit)
    held = corpus.files(m.slice, held_out=True, limit=held_limit)
    held_other = corpus.files(other, held_out=True, limit=held_limit)
    convs = corpus.chat_samples(train_files, **_chat_kwargs(recipe))
    convs += _parent_chat(m, recipe, other)

    bar.stage("tokenizer")
    if parent_dir is None:
        texts = [f.text for f in train_files]
        tok = corpus.train_tokenizer(texts, recipe.vocab_size, recipe.pretokenizer)
        corpus.save_hf_tokenizer(tok, out, model_max_length=2048)
    else:
        AutoTokenizer.from_pretrained(str(parent_dir)).save_pretrained(str(out))
    tok = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    special = {t: tok.token_to_id(t) for t in corpus.SPECIAL_TOKENS}
    raw = _stream(tok, [f.text for f in train_files], special)
    chat, chat_starts, first_line = _chat_stream(tok, convs)
    chat_info: tuple = (chat_starts, first_line)
    if recipe.chat_drills:
        drills = corpus.drill_samples(train_files, DRILL_VARIANTS, **_chat_kwargs(recipe))
        chat_info += (_chat_stream(tok, drills),)
    d = _Data(
        train_files,
        held,
        convs,
        raw,
        chat,
        chat_info,
        _stream(tok, [f.text for f in held], special),
        _stream(tok, [f.text for f in held_other], special),
        corpus.held_out_requests(held, recipe.eval_prompts, recipe.chat_signature),
        corpus.held_out_requests(held, recipe.eval_prompts, table=corpus.HELD_OUT_PHRASINGS),
    )
    return tok, special, d


def _chat_kwargs(recipe: tr.Recipe) -> dict[str, Any]:
    """How ``recipe`` phrases its chat requests (``corpus.chat_samples``' options)."""
    r = recipe
    return dict(
        varied=r.chat_varied,
        signed=r.chat_signature,
        unsigned=r.chat_unsigned,
        grammar=r.chat_grammar,
        tails=r.chat_tails,
        dotted=r.chat_dotted,
        renamed=r.chat_renamed,
        questions=r.chat_questions,
        phrasal=r.chat_phrasal,
    )


def _parent_chat(m: Member, recipe: tr.Recipe, other: str) -> list[dict]:
    """A v2's share ``chat_parent_mix`` of chat samples from its parent's slice (``other``),
    evenly spaced, so that its fine-tune keeps the requests its v1 learnt to read."""
    if not recipe.chat_parent_mix or m.parent is None:
        return []
    convs = corpus.chat_samples(
        corpus.files(other, limit=recipe.file_limit), **_chat_kwargs(recipe)
    )
    n = round(len(convs) * recipe.chat_parent_mix)
    return [convs[i * len(convs) // n] for i in range(n)] if n else []


def build_into(
    m: Member,
    size: str,
    recipe: tr.Recipe,
    out: Path,
    parent_dir: Path | None,
    progress: Progress | None = None,
    on_phase=None,
    strict: bool = False,
) -> None:
    """Build member ``m`` into the (new or empty) directory ``out``; writes the HF files and
    zoo.json. Stages are reported through ``progress`` (eagle3kit.core.progress) and timed.
    ``on_phase(name, model, tok, special, data)``, when given, is called after "training"
    and after "unloop" (benchmarks measure the model between phases). zoo.json records the
    chat figures against ``CHAT_BAR``; with ``strict``, a member below it raises Eagle3Error
    instead (nothing is cached)."""
    from eagle3kit.zoo.members import BUILD_THREADS

    t0, cpu0 = time.time(), _cpu_seconds()
    out.mkdir(parents=True, exist_ok=True)
    progress = progress if callable(progress) else None  # old callers passed a bool
    label = m.name if size == "full" else f"{m.name}-{size}"
    with _Stages(progress, f"building {label}") as bar, _deterministic(BUILD_THREADS[size]):
        tok, special, d = _prepare(m, size, recipe, out, parent_dir, bar)
        bar.stage("training")
        model = _initial_model(m, size, recipe, tok, special, parent_dir)
        streams = (d.raw, d.chat)
        last_loss = tr.train(model, streams, recipe, m.seed, bar.step, d.chat_info)
        if on_phase is not None:
            on_phase("training", model, tok, special, d)
        if recipe.unloop_steps:
            bar.stage("unlikelihood against greedy loops")
            starts = (d.chat == special[corpus.ROLE_TOKENS[2]]).nonzero()[:, 0] + 2  # after \n
            eos, pad = special[corpus.EOS], special[corpus.PAD]
            tr.unloop(model, streams, recipe, m.seed, eos, pad, starts, bar.step, d.chat_info)
            if on_phase is not None:
                on_phase("unloop", model, tok, special, d)

        bar.stage("evaluating")
        other = "test" if m.slice == "lib" else "lib"
        metrics = _metrics(model, tok, special, recipe, d, other, last_loss)
        warning = chat_bar_warning(label, metrics["chat"])
        metrics["chat"]["bar"] = {"required": CHAT_BAR, "below": below_chat_bar(metrics["chat"])}
        if strict and warning:
            raise Eagle3Error(f"{warning}; not caching it (--strict)")
        bar.stage("saving")
        model.save_pretrained(str(out))
    doc = _manifest(m, label, size, recipe, model, d, metrics)
    doc["build_seconds"] = round(time.time() - t0, 1)
    doc["build_cpu_seconds"] = round(_cpu_seconds() - cpu0, 1)  # user + sys, all threads
    doc["stage_seconds"] = bar.seconds
    doc["built_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    atomic_write_json(out / "zoo.json", doc)


def _initial_model(m: Member, size: str, recipe: tr.Recipe, tok, special, parent_dir):
    """The model training starts from: a fresh one seeded with ``m.seed`` (and the copying
    circuit where the recipe asks for it) for a v1, the parent's weights for a v2."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(m.seed)
    if parent_dir is not None:
        with quiet_transformers():  # no "Loading weights" bar beside ours
            return AutoModelForCausalLM.from_pretrained(str(parent_dir), dtype=torch.float32)
    vocab = tok.get_vocab_size()
    model = tr.new_model(tr.model_config(m.arch, size, vocab, special, recipe.shape))
    if recipe.copy_circuit:
        gen = torch.Generator().manual_seed(m.seed)
        circuit.install(model, m.arch, gen, recipe.copy_circuit)
    return model
