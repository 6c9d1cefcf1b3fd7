"""The one checker of a drafter on its own: `check_drafter(header) -> [Finding]`.

compat reports every finding; convert refuses on the first error (nothing written), so a
drafter compat fails on its own is never converted. The checks, from headers and the two
small index tensors only:
- shapes against the config (lm_head rows against `draft_vocab_size`, fc columns against
  `num_aux x target_hidden_size`, embed_tokens against `[vocab_size, hidden_size]`, ...);
- required tensors (lm_head; d2t when the vocabularies differ; the flags' norms); embed_tokens
  absent is normal (info); t2d absent is told, with how it is derived from d2t
  (core/vocab.derive_t2d; without d2t, missing-d2t already says what is wrong);
- the d2t/t2d pair: lengths, marked count, then core/vocab.vocab_problems (integer dtype,
  0 <= target id < vocab, distinct, t2d agreeing with d2t); docs/formats.md "d2t and t2d".
"""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.eagle3.reader import DrafterHeader
from eagle3kit.checkpoint.findings import Finding, error, info
from eagle3kit.core.spec import DraftSpec
from eagle3kit.core.vocab import vocab_problems


def shape_message(canon: str, stored: str, spec: DraftSpec, found: tuple[int, ...]) -> str:
    """`name: expected ..., found ...` for a tensor whose shape disagrees with the config,
    naming the config field behind lm_head rows, fc columns and the embedding."""
    exp = spec.expected_shapes()[canon]
    if canon == "lm_head.weight" and found[:1] != exp[:1]:
        return (
            f"{stored}: expected {exp[0]} rows (config draft_vocab_size="
            f"{spec.draft_vocab_size}), found {found[0]} (shape {list(found)})"
        )
    if canon == "fc.weight" and len(found) == 2 and found[1] != exp[1]:
        return (
            f"{stored}: expected {exp[1]} columns ({spec.num_aux} aux states x config "
            f"target_hidden_size={spec.target_hidden_size}), found {found[1]} "
            f"(shape {list(found)})"
        )
    if canon == "embed_tokens.weight":
        return (
            f"{stored}: expected shape {list(exp)} ([vocab_size, hidden_size]), found {list(found)}"
        )
    return f"{stored}: expected shape {list(exp)} from the config, found {list(found)}"


def _shapes(head: DrafterHeader) -> list[Finding]:
    expected, out = head.spec.expected_shapes(), []
    for canon, stored in sorted(head.names.items()):
        t = head.ckpt.tensors[stored]
        if canon in expected and tuple(t.shape) != expected[canon]:
            code = "embed-shape" if canon == "embed_tokens.weight" else "tensor-shape"
            msg = shape_message(canon, stored, head.spec, tuple(t.shape))
            out.append(error(code, msg, where=t.file))
    return out


def _missing(spec: DraftSpec, req: str) -> tuple[str, str]:
    """(code, message) for a required tensor the file lacks."""
    if req == "lm_head.weight":
        return "missing-lm-head", (
            f"lm_head.weight: expected a tensor (config declares draft_vocab_size="
            f"{spec.draft_vocab_size}), found none; SGLang warns only about unexpected keys "
            "and would serve a random head (accept length 1.00)"
        )
    if req == "d2t":
        return "missing-d2t", (
            f"d2t: expected a tensor (draft_vocab_size={spec.draft_vocab_size} != "
            f"vocab_size={spec.vocab_size}), found none; engines would map draft id i to "
            "target id i"
        )
    return "missing-tensor", f"{req}: expected a tensor, found none"


def _presence(head: DrafterHeader) -> list[Finding]:
    spec, names, out = head.spec, head.names, []
    if "embed_tokens.weight" not in names:
        msg = "embed_tokens.weight: absent (normal: the engine uses the target's embedding)"
        out.append(info("embed-absent", msg))
    for req in spec.required_tensors():
        if req not in names:
            out.append(error(*_missing(spec, req), where=head.tensor_file))
    if spec.draft_vocab_size != spec.vocab_size and "t2d" not in names and "d2t" in names:
        msg = (
            "t2d: absent (engines ignore it); it will be derived from d2t "
            "(t2d[i + d2t[i]] = true) wherever eagle3kit needs one, as when training "
            "starts from this drafter"
        )
        out.append(info("t2d-derived", msg))
    return out


def _index_sizes(spec: DraftSpec, d2t: Any, t2d: Any, vocab: int, where: str) -> list[Finding]:
    out = []
    if d2t is not None and len(d2t) != spec.draft_vocab_size:
        msg = f"d2t: expected {spec.draft_vocab_size} entries (draft_vocab_size), found {len(d2t)}"
        out.append(error("d2t-length", msg, where=where))
    if t2d is not None and int(t2d.astype(bool).sum()) != spec.draft_vocab_size:
        out.append(
            error(
                "t2d-count",
                f"t2d: expected {spec.draft_vocab_size} target ids marked (draft_vocab_size), "
                f"found {int(t2d.astype(bool).sum())}",
                where=where,
            )
        )
    if d2t is None and t2d is not None and len(t2d) != vocab:
        msg = f"t2d: expected {vocab} entries (vocab_size), found {len(t2d)}"
        out.append(error("t2d-length", msg, where=where))
    return out


def _vocab(head: DrafterHeader, vocab: int) -> list[Finding]:
    """d2t/t2d read (they are small) and checked, sizes first."""
    ckpt, names = head.ckpt, head.names
    d2t = ckpt.read_small_tensor(names["d2t"]).reshape(-1) if "d2t" in names else None
    t2d = ckpt.read_small_tensor(names["t2d"]).reshape(-1) if "t2d" in names else None
    index = names.get("d2t", names.get("t2d"))
    where = ckpt.tensors[index].file if index else head.tensor_file
    out = _index_sizes(head.spec, d2t, t2d, vocab, where)
    if d2t is not None:
        t2d_ok = t2d is not None and not out  # a t2d of another size says nothing more
        problems = vocab_problems(d2t, t2d if t2d_ok else None, vocab)
        out += [error(c, m, where=where) for c, m in problems]
    return out


def check_drafter(head: DrafterHeader, target_vocab: int | None = None) -> list[Finding]:
    """Everything wrong with a drafter on its own (module docstring), errors, warnings and
    infos; d2t is checked against `target_vocab` when given (else the drafter's vocab_size)."""
    vocab = target_vocab or head.spec.vocab_size
    return _shapes(head) + _presence(head) + _vocab(head, vocab)
