"""Text every machine has: the Python standard library's own source, split deterministically.

Two slices (the K2 -> K2.5 shift in miniature):
- ``lib``:  the library proper, without test packages, codec tables (``encodings/``) and the
  generated ``pydoc_data`` topics (tables and generated text teach a model to loop).
- ``test``: the top-level ``test/`` package (same language, different habits).

Every file list is sorted; a file is held out for evaluation when ``crc32(path) % 20 == 0``
(about 5% of the files, never trained on by any member).
Besides raw files, each slice yields chat samples built with ``ast`` from its functions
("Write the Python function `x` from `m`." + the docstring summary -> the function's source),
so chat-template code paths see a model that answers in its own format.
"""

from __future__ import annotations

import ast
import functools
import platform
import re
import sysconfig
import textwrap
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

from eagle3kit.zoo.phrasings import (  # noqa: F401  (also corpus.X for callers)
    HELD_OUT_PHRASINGS,
    HELD_OUT_PHRASINGS_B,
    HELD_OUT_PHRASINGS_C,
    HELD_OUT_PHRASINGS_D,
    HELD_OUT_SETS,
    OPENERS,
    PHRASINGS,
    SIGNED_PHRASINGS,
    TAILS,
    USER_PHRASINGS,
    grammar_phrasings,
    near_held_out,
    phrasal_phrasings,
    question_phrasings,
)

SLICES = ("lib", "test")
HELD_OUT_MOD = 20  # 1 file in 20 is held out
_SKIP_TOP = {"site-packages", "encodings", "pydoc_data", "test", "__pycache__"}
_SKIP_PART = {"test", "tests", "idle_test", "__pycache__", "data"}
_SKIP_FILE_PREFIXES = ("_sysconfigdata", "entities")  # generated tables
MAX_FILE_CHARS = 200_000

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, BOS, EOS, *ROLE_TOKENS)

# Jinja chat template. `{% generation %}` marks assistant tokens, so
# `apply_chat_template(..., return_assistant_tokens_mask=True)` gives the loss mask.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{ '<|assistant|>\n' }}{% generation %}{{ message['content'] + eos_token }}{% endgeneration "
    "%}{{ '\n' }}"
    "{%- else %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|assistant|>\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class SourceFile:
    """One stdlib file: its path relative to the stdlib root and its text."""

    rel: str
    text: str


def stdlib_root() -> Path:
    """The running interpreter's standard-library directory."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_name() -> str:
    """The training text's origin as a reader can use it on any machine (the folder's path is
    the building machine's): "stdlib of Python 3.11.7 (sysconfig 'stdlib')"."""
    return f"stdlib of Python {platform.python_version()} (sysconfig 'stdlib')"


def _in_slice(rel: Path, slice_name: str) -> bool:
    parts = rel.parts
    if parts[-1].startswith(_SKIP_FILE_PREFIXES):
        return False
    if slice_name == "test":
        return parts[0] == "test" and not (set(parts[1:-1]) & _SKIP_PART)
    return parts[0] not in _SKIP_TOP and not (set(parts[:-1]) & _SKIP_PART)


def _slice_paths(slice_name: str) -> list[Path]:
    root = stdlib_root()
    if slice_name == "test":
        tops = [root / "test"]
    else:
        tops = [p for p in root.iterdir() if p.name not in _SKIP_TOP]
    found: list[Path] = []
    for top in tops:
        cands = [top] if top.is_file() else top.rglob("*.py") if top.is_dir() else []
        found += [p.relative_to(root) for p in cands if p.suffix == ".py"]
    return sorted(p for p in found if _in_slice(p, slice_name))


def spaced(items: list, n: int | None) -> list:
    """At most ``n`` evenly spaced items of ``items``, in order (all of them when ``n`` is None)."""
    if n is None or len(items) <= n:
        return items
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def files(slice_name: str, *, held_out: bool = False, limit: int | None = None) -> list[SourceFile]:
    """The slice's training (or held-out) files, sorted by path.

    ``limit`` keeps an evenly spaced subset of at most that many files (small builds).
    """
    if slice_name not in SLICES:
        raise ValueError(f"unknown slice {slice_name!r}")
    rels = [
        r
        for r in _slice_paths(slice_name)
        if (zlib.crc32(r.as_posix().encode()) % HELD_OUT_MOD == 0) == held_out
    ]
    rels = spaced(rels, limit)
    root = stdlib_root()
    out = []
    for rel in rels:
        try:
            text = (root / rel).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # a few test files are deliberately not UTF-8
        text = text.replace("\r\n", "\n")
        if 0 < len(text) <= MAX_FILE_CHARS:
            out.append(SourceFile(rel.as_posix(), text))
    return out


@dataclass(frozen=True)
class Function:
    """One function of a source file: name, module, first docstring paragraph, source."""

    name: str
    module: str
    doc: str | None
    code: str
    head: str = ""  # the source's opening lines through the docstring ("" when none or long)
    salt: str = ""  # appended to the key of every per-function draw (``key``): another draw

    @property
    def key(self) -> str:
        """What the per-function draws hash (phrasing, opener, renaming): module.name+salt."""
        return f"{self.module}.{self.name}{self.salt}"


def functions(src: list[SourceFile], *, min_chars: int = 80, max_chars: int = 1200):
    """The functions of ``src`` (dedented source of ``min_chars``..``max_chars``), in file
    and ``ast.walk`` order."""
    out: list[Function] = []
    for f in src:
        try:
            tree = ast.parse(f.text)
        except (SyntaxError, ValueError):
            continue
        module = f.rel[:-3].replace("/", ".").removesuffix(".__init__")
        lines = f.text.splitlines(keepends=True)
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            code = textwrap.dedent("".join(lines[node.lineno - 1 : node.end_lineno])).rstrip()
            if not (min_chars <= len(code) <= max_chars):
                continue
            doc = ast.get_docstring(node)
            doc = doc.strip().split("\n\n")[0] if doc else None
            out.append(Function(node.name, module, doc, code, _head(node, code)))
    return out


HEAD_LINES = 12  # a docstring longer than this stays out of a signed request's code


def _head(node, code: str) -> str:
    """The lines of ``code`` through the docstring statement of the function ``node`` (an
    ast node): what a "complete this function" request shows. "" when the function has no
    docstring or its ``def`` and docstring span more than ``HEAD_LINES`` lines."""
    first = node.body[0] if node.body else None
    if not (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return ""
    n = first.end_lineno - node.lineno + 1
    return "\n".join(code.split("\n")[:n]) if n <= HEAD_LINES else ""


def request(
    fn: Function, phrasing: int = 0, docstring: bool = True, signed: bool = False, table=None
) -> str:
    """The user request for ``fn`` in phrasing ``phrasing`` (index into ``PHRASINGS``, or
    ``SIGNED_PHRASINGS`` when ``signed``, or into ``table`` when given), with the docstring's
    first paragraph when ``docstring`` and the function has one. A signed request with the
    docstring shows it as code, the function's opening lines through the docstring
    (``Function.head``), when they are short enough; the answer then opens with a copy of them."""
    if table is None:
        table = SIGNED_PHRASINGS if signed else PHRASINGS
    if signed and docstring and fn.head:
        return table[phrasing % len(table)].format(f=fn.name, m=fn.module, sig=fn.head)
    ask = table[phrasing % len(table)].format(f=fn.name, m=fn.module, sig=signature(fn.code))
    return ask + "\n\n" + fn.doc if docstring and fn.doc else ask


def signature(code: str) -> str:
    """The ``def`` line(s) that open ``code``: up to the first line ending in ":" (at most 8)."""
    lines = code.split("\n")
    for i, line in enumerate(lines[:8]):
        if line.rstrip().endswith(":"):
            return "\n".join(lines[: i + 1])
    return lines[0]


def conversation(ask: str, answer: str) -> dict:
    return {
        "messages": [
            {"role": "user", "content": ask},
            {"role": "assistant", "content": answer},
        ]
    }


def chat_samples(
    src: list[SourceFile],
    *,
    min_chars: int = 80,
    max_chars: int = 1200,
    varied: bool = False,
    signed: bool = False,
    unsigned: float = 0.0,
    grammar: bool = False,
    tails: float = 0.0,
    dotted: float = 0.0,
    renamed: float = 0.0,
    questions: float = 0.0,
    phrasal: float = 0.0,
    salt: str = "",
) -> list[dict]:
    """Chat conversations built from the functions of ``src``, in file and line order.

    Each is ``{"messages": [user, assistant]}``: the user asks for a function by name (with the
    first paragraph of its docstring when it has one); the assistant answers with its source.
    With ``varied`` the phrasing (one of ``PHRASINGS``) and whether the docstring is included
    are chosen per function from a hash of its module and name (deterministic); ``signed``
    uses ``SIGNED_PHRASINGS``. ``unsigned`` (0..1, with ``varied``): that share of the
    functions (by the same hash) is asked for in ``USER_PHRASINGS`` (``grammar_phrasings()``
    when ``grammar``), without the signature. ``tails``, ``dotted``, ``questions`` and
    ``phrasal`` (grammar only): see ``grammar_template``. ``renamed``: that share of the
    functions (by a hash of their own) is asked for and answered under a made-up name
    (``renamed_function``). ``salt``: every per-function draw is made again with this salt
    (``Function.key``), so the same functions come out phrased otherwise.
    """
    user = grammar_phrasings() if grammar else USER_PHRASINGS
    fns = functions(src, min_chars=min_chars, max_chars=max_chars)
    parts = name_parts(fns) if renamed else ()
    fns = [replace(fn, salt=salt) for fn in fns] if salt else fns
    convs = []
    for fn in fns:
        phrasing, doc, table, sig = 0, True, None, signed
        if varied:
            h = zlib.crc32(fn.key.encode())
            phrasing, doc = h % len(PHRASINGS), (h >> 8) % 3 != 0
            if (h >> 16) % 1000 < unsigned * 1000:
                table, sig = user, False
                phrasing = (h >> 4) % len(user) if not grammar else _pick(fn, len(user))
                if grammar and (tails or dotted or questions or phrasal):
                    table = (grammar_template(fn, tails, dotted, questions, phrasal),)
                    phrasing = 0
        as_user = table is not None
        if renamed and _share(fn, "rename", renamed):
            fn = renamed_function(fn, parts)
        ask = request(fn, phrasing, doc, sig, table)
        if grammar and as_user:
            ask = request_opener(fn)(ask)
        convs.append(conversation(ask, fn.code))
    return convs


def drill_samples(src: list[SourceFile], variants: int, **kw) -> list[dict]:
    """Naming drills (round 9's ``chat_drills``): every function of ``src`` asked for
    ``variants`` more times as users write (``chat_samples`` with ``kw``, all unsigned, its
    draws salted "#1", "#2", ...), each answered with its first line only (what names it)."""
    out = []
    for v in range(1, variants + 1):
        for conv in chat_samples(src, **{**kw, "unsigned": 1.0, "salt": f"#{v}"}):
            ask, answer = (m["content"] for m in conv["messages"])
            out.append(conversation(ask, answer.split("\n", 1)[0]))
    return out


def name_parts(fns: list[Function]) -> tuple[str, ...]:
    """The pieces of the functions' names between underscores (sorted, distinct, no dunder
    names): what ``renamed_function`` makes names of."""
    names = [f.name for f in fns if not f.name.startswith("__")]
    return tuple(sorted({p for n in names for p in n.split("_") if p}))


def renamed_function(fn: Function, parts: tuple[str, ...]) -> Function:
    """``fn`` under a made-up name of 2-4 of ``parts`` joined by "_" (by a hash of its name;
    a leading "_" kept), the name replaced wherever it stands as a word in its code and
    docstring: recalling such a name is impossible, so an answer can only take it from the
    request (recipe 10's ``chat_renamed``)."""
    if fn.name.startswith("__") or not parts:
        return fn
    h = zlib.crc32(f"name:{fn.key}".encode())
    k = 2 + h % 3
    picked = [parts[(h >> (4 + 7 * i)) % len(parts)] for i in range(k)]
    new = "_" * (len(fn.name) - len(fn.name.lstrip("_"))) + "_".join(picked)
    word = re.compile(rf"(?<![\w.]){re.escape(fn.name)}(?!\w)")

    def sub(text: str | None) -> str | None:
        return None if text is None else word.sub(new, text)

    return Function(new, fn.module, sub(fn.doc), sub(fn.code), sub(fn.head), fn.salt)


def request_opener(fn: Function):
    """How a grammar request for ``fn`` opens (by a hash of its name): a function that puts
    one of ``OPENERS`` before the request, its first letter lower-cased after an opener that
    ends in ":" or "," and in a quarter of those without an opener (users type so too)."""
    h = zlib.crc32(f"opener:{fn.key}".encode())
    opener = OPENERS[h % len(OPENERS)]
    lower = opener.rstrip().endswith((":", ",")) or (not opener and (h >> 8) % 4 == 0)

    def put(ask: str) -> str:
        return opener + (ask[0].lower() + ask[1:] if lower else ask)

    return put


@functools.cache
def dotted_split() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``grammar_phrasings()`` split into the templates with a dotted name ("{m}.{f}") and
    the rest."""
    g = grammar_phrasings()
    return tuple(t for t in g if "{m}.{f}" in t), tuple(t for t in g if "{m}.{f}" not in t)


def grammar_template(
    fn: Function, tails: float, dotted: float, questions: float = 0.0, phrasal: float = 0.0
) -> str:
    """The grammar template a request for ``fn`` uses (by hashes of its name): ``questions``
    of the requests are questions (``question_phrasings()``), ``phrasal`` of the others use a
    verb with a particle (``phrasal_phrasings()``); of the rest, with ``dotted`` > 0, that
    share draws from the dotted templates and the others from the rest (users write "`m.f`"
    often; a uniform draw gives it a fifth); ``tails`` of them end with one of ``TAILS``
    after the phrasing."""
    h = zlib.crc32(f"tail:{fn.key}".encode())
    q = _share(fn, "question", questions)
    ph = not q and _share(fn, "phrasal", phrasal)
    g = question_phrasings() if q else phrasal_phrasings() if ph else grammar_phrasings()
    if dotted > 0 and not q and not ph:
        g = dotted_split()[0 if (h >> 20) % 1000 < dotted * 1000 else 1]
    t = g[_pick(fn, len(g))]
    return t + TAILS[(h >> 4) % len(TAILS)] if h % 1000 < tails * 1000 else t


def _share(fn: Function, tag: str, p: float) -> bool:
    """Whether ``fn`` falls in the share ``p`` (0..1) of functions drawn by the hash ``tag``."""
    return zlib.crc32(f"{tag}:{fn.key}".encode()) % 1000 < p * 1000


def _pick(fn: Function, n: int) -> int:
    """A phrasing index in 0..n-1 for ``fn`` from a hash of its name and module of its own
    (the chat hash's bits are too few for a table of hundreds)."""
    return zlib.crc32(f"phrasing:{fn.key}".encode()) % n


def held_out_requests(
    src: list[SourceFile], n: int, signed: bool = False, table=None
) -> list[dict]:
    """``n`` chat requests (evenly spaced) for functions of the held-out files ``src``: one per
    distinct name, no dunder names; request i uses phrasing ``i % len(table)`` of ``table``
    (``PHRASINGS``, or ``SIGNED_PHRASINGS`` when ``signed``; ``HELD_OUT_PHRASINGS`` asks as
    users do) and the docstring on every other pair. Each: ``{"name", "module", "messages":
    [user], "answer"}`` (``answer``: the function's true source, for reference figures)."""
    if table is None:
        table = SIGNED_PHRASINGS if signed else PHRASINGS
    seen: dict[str, int] = {}
    fns = functions(src)
    for fn in fns:
        seen[fn.name] = seen.get(fn.name, 0) + 1
    unique = [fn for fn in fns if seen[fn.name] == 1 and not fn.name.startswith("__")]
    out = []
    for i, fn in enumerate(spaced(unique, n)):
        ask = request(fn, i % len(table), (i // len(table)) % 2 == 0, signed, table)
        out.append(
            {
                "name": fn.name,
                "module": fn.module,
                "messages": [conversation(ask, "")["messages"][0]],
                "answer": fn.code,
            }
        )
    return out


# How the text is cut into words before BPE. "bytelevel": GPT-2's split, where a word takes
# the space before it, so "`f`" and "def f(" give the name different first tokens. "words":
# an identifier (letters, digits, "_") is a word of its own and takes the space after it, so
# a name is the same tokens in "`m.f`", "f()" and "def f(": copying it is copying tokens.
PRETOKENIZERS = ("bytelevel", "words", "idents")
_WORDS = r"[\p{L}\p{N}_]+ ?|[^\s\p{L}\p{N}_]+ ?|\s+"
# "idents" (recipe 10): an identifier never takes a space, so a bare name
# followed by one ("function f in m") is the same tokens as in "def f(" too
_IDENTS = r"[\p{L}\p{N}_]+|[^\s\p{L}\p{N}_]+ ?|\s+"


def train_tokenizer(texts: list[str], vocab_size: int, pretokenizer: str = "bytelevel"):
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on ``texts`` (deterministic), the
    text cut into words by ``pretokenizer`` (one of ``PRETOKENIZERS``)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    if pretokenizer not in PRETOKENIZERS:
        raise ValueError(f"unknown pretokenizer {pretokenizer!r}")
    tok = Tokenizer(models.BPE())
    if pretokenizer in ("words", "idents"):
        regex = _WORDS if pretokenizer == "words" else _IDENTS
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(regex), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def render_chat(messages: list[dict]) -> str:
    """The text ``CHAT_TEMPLATE`` renders for ``messages`` (no generation prompt), without Jinja."""
    parts = [BOS]
    for m in messages:
        parts.append(f"<|{m['role']}|>\n{m['content']}{EOS}\n")
    return "".join(parts)


def save_hf_tokenizer(tok, out_dir: Path, model_max_length: int) -> None:
    """Save ``tok`` as a normal Hugging Face tokenizer dir (tokenizer.json +
    tokenizer_config.json)."""
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=list(ROLE_TOKENS),
        model_max_length=model_max_length,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )
    hf.save_pretrained(str(out_dir))
