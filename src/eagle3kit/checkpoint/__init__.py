"""Drafter and target checkpoints, from headers: safetensors I/O (never reading weights it
does not need), the three drafter layouts (SGLang/SpecForge, speculators/vLLM, original EAGLE)
<-> DraftSpec, engine rules by release, who wrote a drafter, inspect, compat and convert.
Nothing here imports torch at import time."""
