"""A conversation -> (token ids, loss mask), through the target tokenizer's own chat template.

The loss mask marks the tokens the drafter must learn to predict: every assistant turn's
content and the end-of-turn token that closes it (e.g. `<|eot_id|>`, `<|im_end|>`,
`<｜end▁of▁sentence｜>`), and nothing of the prompt: not the role headers, not the generation
prompt (Qwen3's non-thinking `<think>\\n\\n</think>\\n\\n` is part of the prompt), not the
newline some templates print after the end-of-turn token.

Two ways to find those tokens:

1. The template marks them with `{% generation %}...{% endgeneration %}`: Hugging Face's
   `apply_chat_template(..., return_assistant_tokens_mask=True)` returns the mask.
2. Otherwise, diff growing prefixes. For assistant turn i (turns m_0..m_n):

       P_i = render(m_0..m_{i-1}, add_generation_prompt=True)    # the prompt the server sees
       Q_i = render(m_0..m_i)                                    # prompt + answer + suffix
       answer_i = Q_i[len(P_i):] minus the template's suffix, plus its first token (the EOT)

   The suffix (what the template prints after an assistant message, e.g. `<|im_end|>\\n`) is
   found once by rendering a sentinel answer; its first token is the end-of-turn token.
   answer_i is then located in the full render R = render(m_0..m_n): at len(P_i) when R
   extends Q_i's prompt there (most templates), else at its next occurrence after the previous
   answer (templates that rewrite history, e.g. Qwen3 drops the empty think block of earlier
   turns), else as the template renders it in history (`_history_span`: Qwen3 and Kimi
   thinking templates drop the reasoning of earlier answers). Tokens of R whose character
   span overlaps an answer span are masked.

The sequence itself is always the full render R tokenised as the server would tokenise it
(`add_special_tokens=False`: templates print their own BOS).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.data.conversations import Malformed

_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")
SENTINEL = "E3K_SENTINEL_ANSWER"


def template_text(tokenizer: Any, where: str = "tokenizer") -> str:
    """The tokenizer's chat template (its default one when it has several)."""
    tpl = getattr(tokenizer, "chat_template", None)
    if isinstance(tpl, dict):
        tpl = tpl.get("default") or next(iter(tpl.values()), None)
    if not isinstance(tpl, str) or not tpl.strip():
        raise Eagle3Error(
            f"{where}: expected a tokenizer with a chat template, found none "
            "(pass --chat-template FILE)"
        )
    return tpl


def template_sha256(template: str) -> str:
    return hashlib.sha256(template.encode()).hexdigest()


def marks_generation(template: str) -> bool:
    """Whether the template wraps assistant output in `{% generation %}` blocks."""
    return bool(_GENERATION.search(template))


class ChatEncoder:
    """`encode(turns) -> (ids, mask)` for one tokenizer + template; see the module docstring."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        template: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
        where: str = "tokenizer",
    ) -> None:
        self.tok = tokenizer
        self.template = template if template is not None else template_text(tokenizer, where)
        self.kwargs = dict(template_kwargs or {})
        self.where = where
        self.mode = "generation" if marks_generation(self.template) else "prefix-diff"
        if not getattr(tokenizer, "is_fast", False):
            raise Eagle3Error(
                f"{where}: expected a fast tokenizer (tokenizer.json) for character offsets, "
                f"found {type(tokenizer).__name__}"
            )
        if self.mode == "prefix-diff":
            self.pre, self.post, self.eot = self._probe()

    # -- rendering ------------------------------------------------------------------------
    def render(self, turns: list[dict[str, str]], generation_prompt: bool = False) -> str:
        try:
            out = self.tok.apply_chat_template(
                turns,
                chat_template=self.template,
                tokenize=False,
                add_generation_prompt=generation_prompt,
                **self.kwargs,
            )
        except Exception as e:  # jinja2 errors and the template's own raise_exception
            raise Malformed(f"chat template: {type(e).__name__}: {e}") from e
        return out if isinstance(out, str) else out[0]

    def _probe(self) -> tuple[str, str, str]:
        """(pre, post, eot): what surrounds an assistant answer in Q beyond the prompt P."""
        user = {"role": "user", "content": "Hello there."}
        try:
            p = self.render([user], True)
            q = self.render([user, {"role": "assistant", "content": SENTINEL}])
        except Malformed as e:
            raise Eagle3Error(
                f"{self.where}: the chat template fails on a plain user/assistant pair ({e})"
            ) from e
        if not q.startswith(p) or SENTINEL not in q[len(p) :]:
            raise Eagle3Error(
                f"{self.where}: the chat template's assistant turn does not extend its generation "
                f"prompt; cannot locate answers (add {{% generation %}} marks to the template)"
            )
        diff = q[len(p) :]
        pre, post = diff.split(SENTINEL, 1)
        eot = ""
        if post:
            enc = self.tok(post, add_special_tokens=False, return_offsets_mapping=True)
            offsets = enc["offset_mapping"]
            eot = post[: offsets[0][1]] if offsets else ""
        return pre, post, eot

    # -- the mask -------------------------------------------------------------------------
    def encode(self, turns: list[dict[str, str]]) -> tuple[list[int], list[bool]]:
        """Token ids of the whole conversation and its loss mask (True = assistant token)."""
        if self.mode == "generation":
            return self._encode_generation(turns)
        full = self.render(turns)
        spans = self.answer_spans(turns, full)
        enc = self.tok(full, add_special_tokens=False, return_offsets_mapping=True)
        ids = list(enc["input_ids"])
        return ids, _mask_from_spans(enc["offset_mapping"], spans)

    def _encode_generation(self, turns: list[dict[str, str]]) -> tuple[list[int], list[bool]]:
        try:
            out = self.tok.apply_chat_template(
                turns,
                chat_template=self.template,
                tokenize=True,
                return_dict=True,
                return_assistant_tokens_mask=True,
                **self.kwargs,
            )
        except Exception as e:
            raise Malformed(f"chat template: {type(e).__name__}: {e}") from e
        ids = list(out["input_ids"])
        mask = [bool(m) for m in out["assistant_masks"]]
        return ids, mask

    def answer_spans(self, turns: list[dict[str, str]], full: str) -> list[tuple[int, int]]:
        """Character spans [start, end) in `full` of each assistant answer + its EOT."""
        spans: list[tuple[int, int]] = []
        cursor = 0
        for i, t in enumerate(turns):
            if t["role"] == "assistant":
                spans.append(self._locate(turns, i, full, cursor))
                cursor = spans[-1][1]
        return spans

    def _locate(
        self, turns: list[dict[str, str]], i: int, full: str, cursor: int
    ) -> tuple[int, int]:
        """Where answer i (+ EOT) lies in `full`, at or after `cursor`."""
        p = self.render(turns[:i], True)
        q = self.render(turns[: i + 1])
        if not q.startswith(p) or not q.endswith(self.post):
            raise Malformed(
                f"turn {i + 1}: the chat template renders this answer outside its generation "
                "prompt/suffix"
            )
        answer = q[len(p) : len(q) - len(self.post)] + self.eot
        if len(p) >= cursor and full.startswith(answer, len(p)):
            return len(p), len(p) + len(answer)  # the template only appends
        start = full.find(answer, cursor)
        if start < 0 and self.pre and answer.startswith(self.pre):
            answer = answer[len(self.pre) :]  # history drops what the prompt added
            start = full.find(answer, cursor)
        if start >= 0:
            return start, start + len(answer)
        span = self._history_span(turns, i, p, full) if i + 1 < len(turns) else None
        if span is None or span[0] < cursor:
            raise Malformed(f"turn {i + 1}: the answer is not found in the full render")
        return span

    def _history_span(
        self, turns: list[dict[str, str]], i: int, p: str, full: str
    ) -> tuple[int, int] | None:
        """Answer i as the template renders it in history (e.g. its reasoning dropped).

        A = render(turns[:i]), H = render(turns[:i+2]) (answer i followed by the next user
        turn). In H after A come the assistant header, the answer, the EOT: the header is the
        longest common prefix of that text and the generation prompt P[len(A):]; the answer
        runs from there to the first EOT. Used only when `full` starts with that much of H.
        """
        a = self.render(turns[:i])
        h = self.render(turns[: i + 2])
        if not self.eot or not h.startswith(a) or not p.startswith(a):
            return None
        rest, gen = h[len(a) :], p[len(a) :]
        k = 0
        while k < min(len(rest), len(gen)) and rest[k] == gen[k]:
            k += 1
        end = rest.find(self.eot, k)
        if end < 0 or not full.startswith(h[: len(a) + end + len(self.eot)]):
            return None
        return len(a) + k, len(a) + end + len(self.eot)


def _mask_from_spans(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[bool]:
    """Token k is masked when its characters [s, e) overlap any span (spans sorted, disjoint)."""
    mask = [False] * len(offsets)
    j = 0
    for k, (s, e) in enumerate(offsets):
        while j < len(spans) and spans[j][1] <= s:
            j += 1
        if j < len(spans) and e > s and s < spans[j][1] and e > spans[j][0]:
            mask[k] = True
    return mask
