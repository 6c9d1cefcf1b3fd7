"""Checkpoint formats: safetensors headers (never reading weights), the three drafter layouts
(SGLang/SpecForge, speculators/vLLM, original EAGLE) <-> DraftSpec, and conversion."""
