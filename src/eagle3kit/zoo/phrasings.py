"""How the zoo's chat requests are phrased (docs/zoo.md, lab/notebook.md "Recipe 10"): the signed
and user phrasings recipes train on, the held-out sets the zoo bar measures with (never trained
on, nor anything within ``NEAR_EDITS`` word edits of them), and the grammar of user requests
with its openers, tails and questions. `corpus` builds the chat samples from them.
"""

from __future__ import annotations

import functools
import re
from collections import Counter

# The ways a chat request asks for a function (``{f}``: its name, ``{m}``: its module). The
# name stands after a space and before "()", so its tokens in the request are the very tokens
# of the answer's first line "def {f}(": the byte-level BPE gives "`name" and " name"
# different first tokens, and copying a token is within reach of a small model where mapping
# one token to another is not (docs/zoo.md). Training and the held-out figures use them all.
PHRASINGS = (
    "Write the Python function {f}() from `{m}`.",
    "Implement {f}() from the `{m}` module.",
    "In `{m}`, write the function {f}().",
    "Show me the code of {f}() in `{m}`.",
)
# The same requests with the function's signature (``{sig}``: its ``def`` line(s) as in the
# source), for recipes with ``chat_signature``: the answer's first line is then a copy of
# request tokens ("def f(" splits the same way in both), the pattern the copying circuit
# (zoo/circuit.py) serves; recalling a function from its name alone is beyond these models.
SIGNED_PHRASINGS = (
    "Write the Python function {f}() from `{m}`:\n\n{sig}",
    "Implement this function from the `{m}` module:\n\n{sig}",
    "In `{m}`, complete the function that starts with\n\n{sig}",
    "Show me the code of {f}() in `{m}`. It opens with\n\n{sig}",
)


# Requests phrased the way users write them, without the signature: the name in backticks,
# dotted after its module, or bare. A recipe with ``chat_unsigned`` > 0 trains on a share of
# its requests in these phrasings (answers still open with ``def f(``), so the member learns
# to take the name from the request, not only to copy a signature.
USER_PHRASINGS = (
    "Write `{f}` (module `{m}`).",
    "Code for `{m}.{f}`, please.",
    "How is `{f}` in {m} implemented? Write it.",
    "Function `{f}` of `{m}`: write it in Python.",
    "Define {m}.{f}().",
    "I need {f}() from the {m} module.",
    "Give the implementation of `{f}`, as in `{m}`.",
    "{m}: write {f}().",
)
# Phrasings no recipe trains on, for the zoo bar's unsigned figures (benchmarks/zoo_bar.py):
# whether a member generalises to requests it never saw phrased that way (issue 33's examples).
HELD_OUT_PHRASINGS = (
    "Write the Python function `{f}` from `{m}`.",
    "Please write `{m}.{f}`.",
    "Implement {f}() in module {m}",
    "Can you show me `{f}()` from {m}?",
)

# A second held-out set, made differently (issue 33): verbs no training phrasing uses and word
# orders no training grammar has (the name at the end, after a relative clause, in a
# question about a module). zoo_bar.py reports it beside HELD_OUT_PHRASINGS, so a figure does
# not hang on four phrasings; tests/test_zoo.py asserts that no training phrasing is near it.
HELD_OUT_PHRASINGS_B = (
    "Reproduce the body of `{f}`, which lives in {m}.",
    "There is a function {f} in `{m}`; recreate it for me.",
    "Could you draft {m}.{f}?",
    "Looking at {m}: spell out `{f}()` in full.",
)
# A third held-out set, written before recipe 10's second trial round looked at anything
# (the second set's figures had shaped that round's grammar): other verbs, other orders.
HELD_OUT_PHRASINGS_C = (
    "What does `{f}` in {m} look like? Rewrite it here.",
    "Paste the source of {m}.{f}().",
    "Dig up {f}() (it is in `{m}`) and print its code.",
    "{m} defines `{f}`. Sketch it.",
)
# A fourth held-out set, written in round 8 of recipe 10 (lab/notebook.md) before any trial
# of a knob made after looking at the third set's misses ("Dig up f() ...": the particle "up"
# taken for the name), so that such a knob is measured on phrasings it was not shaped by.
HELD_OUT_PHRASINGS_D = (
    "Fetch the whole of {f}(); it sits in {m}.",
    "Recall how `{f}` in {m} goes and quote its code.",
    "From {m}, retrieve {f} and show all of it.",
    "Need `{m}.{f}`: the full code, never a summary.",
)
# Every held-out set, in the zoo bar's order (benchmarks/zoo_bar.py: unsigned, _b, _c, _d).
HELD_OUT_SETS = (
    HELD_OUT_PHRASINGS,
    HELD_OUT_PHRASINGS_B,
    HELD_OUT_PHRASINGS_C,
    HELD_OUT_PHRASINGS_D,
)
# Verbs of the second, third and fourth sets: no training phrasing may contain them.
HELD_OUT_VERBS = ("reproduce", "recreate", "draft", "spell", "rewrite", "paste", "dig", "sketch")
HELD_OUT_VERBS += ("fetch", "recall", "quote", "retrieve")

# What a request in the grammar may open with before its phrasing (``request_opener``): most
# open with the phrasing itself, the rest with a greeting or a label, so that the name is not
# simply the message's first word when the phrasing puts it first. No word of a held-out
# phrasing is among them.
OPENERS = ("", "", "", "", "Hi. ", "Hello! ", "Quick one: ", "Task: ", "Next: ", "Thanks. ")
OPENERS += ("OK, ", "One more: ", "Question: ", "Hey, ", "Another request: ", "Good morning. ")
# What a grammar request may end with after its phrasing (``grammar_template``, recipes with
# ``chat_tails``): a clause after the name, some with verbs of their own ("explain", "keep"),
# so that the name is not simply the last name-like word after a verb. No word of a held-out
# phrasing is among them, so a tail never brings a request nearer one (an edit path to the
# request with the tail is one to the request without it, plus the tail's words).
TAILS = (" Thanks!", " No explanation needed.", " Keep comments as they are.", " Just that one.")
TAILS += (" Exactly as written.", " I want to study them.", " Then stop.", " No prose.")
TAILS += (" Nothing else.", " Keep every line.", " Line by line.", " I will test them.")
TAILS += (" Do not explain anything.", " Verbatim, no changes.", " Cheers.")

# How a request names the function and its module: bare, backticked, with "()", dotted.
_NAME_FORMS = ("{f}", "`{f}`", "{f}()", "`{f}()`")
_DOTTED_FORMS = ("{m}.{f}", "`{m}.{f}`", "{m}.{f}()", "`{m}.{f}()`")
_MODULE_FORMS = ("from {m}", "from `{m}`", "in `{m}`", "of the {m} module", "from module `{m}`")
_MODULE_FORMS += ("(module {m})", "as defined in {m}", "in the `{m}` module")


def _grammar() -> tuple[str, ...]:
    """Recipe 10's training phrasings for requests as users write them (``chat_grammar``): a
    grammar of verbs x name forms (bare, backticked, with "()", dotted after the module) x
    module forms x word orders x endings, so the name stands at many places of a request
    (after a verb, after "module", after "." or "`", near the start and the end), but never
    first: a grammar with the name as the first word taught members to take any unknown
    first word for the name (lab/notebook.md, "Recipe 10"). Templates near a held-out
    phrasing (``near_held_out``) are left out; sorted, deterministic."""
    verbs = ("Write", "Implement", "Code", "Define", "Give me", "Show me", "Provide", "I need")
    verbs += ("Please implement", "Type in", "Create", "Let me have", "Generate", "Produce")
    verbs += ("Compose", "Construct", "Program", "Supply", "Make", "Send me", "Share")
    verbs += ("Put together", "I want", "Kindly write", "Output the code of", "Build")
    names, dotted, mods = _NAME_FORMS, _DOTTED_FORMS, _MODULE_FORMS
    out: set[str] = set()
    for v in verbs:
        lv = v[0].lower() + v[1:] if not v.startswith("I ") else v
        it = " me" not in v and not v.endswith(" of")  # "{name}: write it." reads right
        for end in (".", "") if v.startswith(("Please", "Kindly")) else (".", "", ", please."):
            for n in dotted:
                out.add(f"{v} {n} for me{end}")
                out.add(f"{v} {n} as a Python function{end}")
                out.add(f"{v} the code of {n}{end}")
                out.add(f"{v} {n} now{end}")
                if it:
                    out.add(f"About {n}: {lv} it{end}")
                    out.add(f"I am after {n}; {lv} it{end}")
                out.add(f"{v} the function {n}{end}")
            for n in names:
                for md in mods:
                    out.add(f"{v} {n} {md}{end}")
                    if it:
                        out.add(f"About {n} {md}: {lv} it{end}")
                    out.add(f"{v} the Python function {n} {md}{end}")
                out.add(f"In {{m}}, {lv} {n}{end}")
                out.add(f"Module `{{m}}`: {lv} {n}{end}")
                out.add(f"From {{m}}, {lv} the function {n}{end}")
    return tuple(sorted(t for t in out if not near_held_out(t)))


def _words(template: str) -> list[str]:
    """A phrasing's words, lower-cased, without punctuation ("{m}.{f}" gives "{m}", "{f}")."""
    return re.findall(r"\{[fm]\}|[a-z]+", template.lower())


def _edits(a: list[str], b: list[str]) -> int:
    """Word-level edit distance (Levenshtein) between ``a`` and ``b``."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


NEAR_EDITS = 3  # a training phrasing this close (in words) to a held-out one is a near-copy


def near_held_out(template: str) -> bool:
    """Whether ``template`` is a held-out phrasing or a near-copy of one: at most
    ``NEAR_EDITS`` word edits from one of a held-out set (punctuation, backticks and
    "()" ignored), or using a verb of the second, third or fourth set."""
    w = _words(template)
    if any(v in w for v in HELD_OUT_VERBS):
        return True
    return any(_edits(w, h) <= NEAR_EDITS for h in _held_words() if _lacks(w, h) <= NEAR_EDITS)


@functools.cache
def _held_words() -> tuple[list[str], ...]:
    """The words of every held-out phrasing, split once (``near_held_out`` runs per template)."""
    return tuple(_words(h) for s in HELD_OUT_SETS for h in s)


def _lacks(a: list[str], b: list[str]) -> int:
    """A lower bound of ``_edits(a, b)``: the words of the longer that the other lacks."""
    return max(len(a), len(b)) - sum((Counter(a) & Counter(b)).values())


def _questions() -> tuple[str, ...]:
    """Requests as questions that end with the name or its module and "?" (``chat_questions``):
    users ask so, and a grammar without them leaves a "?" after the name unseen (recipe 10's
    members copied it: "def do_POST?("). Near-copies of held-out phrasings are left out."""
    asks = ("Would you give me", "Will you write out", "Can I get", "Could I have", "May I see")
    asks += ("Do you have", "Got", "Any chance of", "How about", "Would you mind producing")
    names, dotted, mods = _NAME_FORMS, _DOTTED_FORMS, _MODULE_FORMS
    out: set[str] = set()
    for q in asks:
        for n in dotted:
            out.add(f"{q} {n}?")
            out.add(f"{q} the function {n}?")
        for n in names:
            out.add(f"{q} {n}?")
            for md in mods:
                out.add(f"{q} {n} {md}?")
                out.add(f"{q} the Python function {n} {md}?")
    return tuple(sorted(t for t in out if not near_held_out(t)))


def _phrasal() -> tuple[str, ...]:
    """Requests whose verb ends in a particle that reads like a name ("Look up f()", "Write
    out m.f"), some with the module in parentheses and a second verb after the name
    (``chat_phrasal``): recipe 10's members took such a particle, or a later verb, for the name
    (lab/notebook.md, round 8). Near-copies of held-out phrasings are left out."""
    verbs = ("Look up", "Write out", "Type up", "Pull up", "Bring up", "Copy out", "Lay out")
    verbs += ("Hand over", "Set down", "Work out", "Spit out", "Whip up", "Write up", "Put down")
    after = ("show", "give me", "write down", "type", "list", "open", "return", "join")
    parens = ("(from {m})", "(module {m})", "(in `{m}`)", "(it lives in {m})", "(see {m})")
    names, dotted, mods = _NAME_FORMS, _DOTTED_FORMS, _MODULE_FORMS
    out: set[str] = set()
    for i, v in enumerate(verbs):
        for n in dotted:
            out.add(f"{v} {n}.")
            out.add(f"{v} {n} and {after[i % len(after)]} the code.")
        for j, n in enumerate(names):
            for md in mods:
                out.add(f"{v} {n} {md}.")
            for k, pr in enumerate(parens):
                a = after[(i + j + k) % len(after)]
                out.add(f"{v} {n} {pr} and {a} its code.")
                out.add(f"{v} {n} {pr}, then {a} it.")
    return tuple(sorted(t for t in out if not near_held_out(t)))


@functools.cache
def phrasal_phrasings() -> tuple[str, ...]:
    """``_phrasal()``, computed once on first use."""
    return _phrasal()


@functools.cache
def question_phrasings() -> tuple[str, ...]:
    """``_questions()``, computed once on first use."""
    return _questions()


@functools.cache
def grammar_phrasings() -> tuple[str, ...]:
    """``_grammar()``, computed once (about a second: the distance checks), on first use."""
    return _grammar()
