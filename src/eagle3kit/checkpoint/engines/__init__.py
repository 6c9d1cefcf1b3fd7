"""The serving engines' rules by release, as data with their sources: `rules` (EAGLE-3
drafters: aux-layer capture, flags, families), `files` (whole-file refusals), `methods`
(the newer methods' rules: DFlash layer ids and semantics, P-EAGLE, `MethodRule`)."""
