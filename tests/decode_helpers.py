"""Drafters for the decoding tests: random, or briefly trained on the target's own greedy text."""

from __future__ import annotations

from pathlib import Path

import torch

from eagle3kit.core.spec import DraftSpec
from eagle3kit.core.vocab import build_vocab
from eagle3kit.data.features import compute_features
from eagle3kit.decode import greedy_generate
from eagle3kit.model.drafter import Eagle3Drafter
from eagle3kit.train.ttt import ttt_loss

PROMPTS = [
    "def ",
    "import ",
    "class ",
    "    return ",
    "for i in ",
    "if __name__",
    "# ",
    '"""',
    "from ",
    "    def ",
    "with open(",
    "try:\n",
    "    if ",
    "print(",
    "self.",
    "raise ",
]
HELD_OUT = ["def main(", "    while ", "x = [", "except "]


def new_drafter(
    target, draft_vocab: int | None = None, counts=None, seed: int = 0
) -> Eagle3Drafter:
    """A random drafter shaped for `target`, using its embedding; a smaller draft vocabulary
    takes the `counts` most frequent target ids (d2t/t2d by eagle3kit.core.vocab)."""
    h, v = target.hidden_size, target.vocab_size
    spec = DraftSpec(
        hidden_size=h,
        intermediate_size=2 * h,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=h // 2,
        vocab_size=v,
        draft_vocab_size=draft_vocab or v,
        target_hidden_size=h,
        aux_layers=target.aux_layers,
        dtype="float32",
    )
    torch.manual_seed(seed)
    d = Eagle3Drafter(spec)
    if draft_vocab and draft_vocab < v:
        d2t, t2d = build_vocab(counts, draft_vocab)
        d.d2t.copy_(d2t)
        d.t2d.copy_(t2d)
    d.set_embedding(target.embed_tokens.weight)
    return d.eval()


def hf_greedy_ids(target, ids: list[int], n: int, eos: int | None = None) -> list[int]:
    """transformers' own greedy decoding (not our decoder): up to n tokens, EOS kept if hit."""
    with torch.no_grad():
        out = target.model.generate(
            torch.tensor([ids], device=target.device),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=target.device),
            do_sample=False,
            max_new_tokens=n,
            eos_token_id=eos,
            pad_token_id=eos if eos is not None else 0,
        )[0, len(ids) :].tolist()
    return out[: out.index(eos) + 1] if eos is not None and eos in out else out


def self_text(target, prompts=PROMPTS, n: int = 40) -> list[list[int]]:
    """prompt + the target's greedy continuation (n tokens), as token ids."""
    eos = target.tokenizer.eos_token_id
    out = []
    for p in prompts:
        ids = target.tokenizer(p)["input_ids"]
        out.append(ids + greedy_generate(target, ids, max_new_tokens=n, eos_token_id=eos).tokens)
    return out


def train_drafter(
    target, seqs: list[list[int]], draft_vocab: int | None = None, steps: int = 200, k: int = 3
) -> Eagle3Drafter:
    """A drafter trained by training-time test (eagle3kit.train.ttt) on `seqs`, full batch."""
    ids, am = pack(seqs)
    counts = torch.bincount(ids[am], minlength=target.vocab_size)
    return fit_ttt(new_drafter(target, draft_vocab, counts), target, ids, am, steps, k)


def pack(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [B, T], mask [B, T]): the sequences left-aligned, zero-padded to the longest."""
    t = max(map(len, seqs))
    ids = torch.zeros(len(seqs), t, dtype=torch.long)  # [B, T]
    am = torch.zeros(len(seqs), t, dtype=torch.bool)  # [B, T]
    for i, s in enumerate(seqs):
        ids[i, : len(s)], am[i, : len(s)] = torch.tensor(s), True
    return ids, am


def fit_ttt(
    d: Eagle3Drafter, target, ids: torch.Tensor, am: torch.Tensor, steps: int, k: int = 3
) -> Eagle3Drafter:
    """`d` trained by training-time test on the packed batch (every token an answer), AdamW
    lr 3e-3, full batch, `steps` steps; returned in eval mode."""
    feats = compute_features(target, ids, am, am, d.d2t)
    opt = torch.optim.AdamW([p for p in d.parameters() if p.requires_grad], lr=3e-3)
    d.train()
    for _ in range(steps):
        loss, _ = ttt_loss(d, feats, k)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return d.eval()


def save_drafter_dir(drafter: Eagle3Drafter, out) -> str:
    """Write `drafter` as an SGLang-layout drafter dir (without embedding: the CLI must take the
    target's)."""
    from eagle3kit.checkpoint.eagle3.convert import save_drafter

    save_drafter(out, drafter.spec, drafter.canonical_state(with_embedding=False), "sglang")
    return str(out)


def chat_jsonl(path, n: int = 4, max_chars: int = 300) -> str:
    """A JSONL of n OpenAI-form conversations from the zoo's held-out stdlib functions."""
    import json

    from eagle3kit.zoo.corpus import chat_samples, files, spaced

    convs = spaced(chat_samples(files("lib", held_out=True), max_chars=max_chars), n)
    with open(path, "w") as f:
        for c in convs:
            f.write(json.dumps(c) + "\n")
    return str(path)


FIXTURE_RECIPE = "v1: self_text(PROMPTS, n=32), train_drafter(draft_vocab=256, steps=120, k=3)"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def build_accepting_drafter(out, member: str = "llama-v1") -> None:
    """Train the fixture drafter for the tiny zoo `member` (~15 s on one core) and write it
    to `out` (an SGLang drafter dir, without embedding) with ``fixture.json``: the target's
    recipe digest and this recipe. Refresh the committed copy with
    ``python -c "import decode_helpers as h; h.build_accepting_drafter(h.FIXTURES /
    'accepting-drafter-llama-v1-tiny')"`` run in tests/."""
    import json

    from eagle3kit import zoo
    from eagle3kit.core.atomic import atomic_dir
    from eagle3kit.model.target import TargetModel

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same arithmetic on every machine
    try:
        target = TargetModel.from_pretrained(zoo.get(member, size="tiny"))
        torch.manual_seed(0)
        d = train_drafter(target, self_text(target, n=32), draft_vocab=256, steps=120)
    finally:
        torch.set_num_threads(threads)
    meta = {"target": f"{member}-tiny", "target_recipe_digest": zoo.recipe_digest(member, "tiny")}
    meta["recipe"] = FIXTURE_RECIPE
    with atomic_dir(out) as tmp:
        save_drafter_dir(d, tmp)
        (tmp / "fixture.json").write_text(json.dumps(meta, indent=2) + "\n")


def accepting_drafter_dir(member: str = "llama-v1") -> str:
    """A drafter that gets accepted (tau well above 1) on the tiny zoo `member`: the committed
    copy in tests/fixtures when it was trained for this target recipe, else one built once
    under ``$EAGLE3KIT_HOME/fixtures/`` (a file lock keeps concurrent runs to one build)."""
    import fcntl
    import json

    from eagle3kit import zoo

    digest = zoo.recipe_digest(member, "tiny")
    committed = FIXTURES / f"accepting-drafter-{member}-tiny"
    if (committed / "fixture.json").is_file():
        meta = json.loads((committed / "fixture.json").read_text())
        if meta.get("target_recipe_digest") == digest and meta.get("recipe") == FIXTURE_RECIPE:
            return str(committed)
    out = zoo.home() / "fixtures" / f"accepting-drafter-{member}-tiny-{digest[:16]}"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        meta_path = out / "fixture.json"
        if not meta_path.is_file() or json.loads(meta_path.read_text())["recipe"] != FIXTURE_RECIPE:
            build_accepting_drafter(out, member)
    return str(out)
