"""EAGLE-3's own format, which the other drafters build on: the three drafter layouts
(SGLang/SpecForge, speculators/vLLM, original EAGLE) <-> DraftSpec, the one reader and writer,
who wrote a drafter, the drafter-alone checker, compat of a drafter with a drafter or a
target, convert between layouts, and the synthetic drafters of the tests."""
