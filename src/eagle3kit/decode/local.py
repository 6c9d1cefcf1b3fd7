"""The local target as `data regenerate`'s generator: its chat template, then plain decoding
(decode/plain.py), greedy at temperature 0, else sampled with temperature and top-p."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.data.conversations import sample_seed
from eagle3kit.data.openai_servers import Answer
from eagle3kit.data.regenerate import Generate, Messages, chat_prompt_ids, stop_ids
from eagle3kit.decode.plain import plain_generate
from eagle3kit.decode.sampling import Sampling, make_generator

if TYPE_CHECKING:
    from eagle3kit.model.target import TargetModel


def local_generator(
    target: TargetModel,
    max_tokens: int,
    temperature: float,
    seed: int = 0,
    template_kwargs: dict | None = None,
    top_p: float = 1.0,
) -> Generate:
    """(history, sample id) -> the target's answer, stopping at EOS / end-of-turn ids, with
    the finish reason a server gives: "length" when `max_tokens` tokens came without a stop.

    Sampling draws from decode/sampling.py's law (temperature, then top-p) with a generator on
    the target's device, seeded by `sample_seed`.
    """
    if target.tokenizer is None:
        raise Eagle3Error(
            f"{target.name_or_path}: the target has no tokenizer (needed for its chat template)"
        )
    sampling = Sampling(max(temperature, 0.0), top_p)
    stops = stop_ids(target)

    def generate(history: Messages, sid: str) -> Answer:
        prompt = chat_prompt_ids(target.tokenizer, history, template_kwargs)
        gen = None
        if not sampling.greedy:
            gen = make_generator(target.device, sample_seed(seed, sid, len(prompt)))
        g = plain_generate(
            target,
            prompt,
            max_new_tokens=max_tokens,
            eos_token_id=stops,
            sampling=sampling,
            generator=gen,
        )
        target.reset()
        text = target.tokenizer.decode(g.tokens, skip_special_tokens=True)
        return Answer(text, "length" if len(g.tokens) >= max_tokens else "stop")

    return generate
