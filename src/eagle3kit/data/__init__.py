"""Training data: conversations -> templated tokens with loss masks (prepare), the draft vocab
(vocab), regeneration by the target (regenerate) and the feature store (capture).

Modules (import the one you need; this package imports nothing heavy):
    conversations  read/validate ShareGPT and OpenAI records -> normalised turns
    hf_datasets    rows of a saved `datasets` folder (datasets, or pyarrow alone) or a hub id
    templates      chat template -> token ids + assistant loss mask
    prepare        `prepare(inputs, target, out)`: the DATA directory
    prepared       the DATA format: `load_prepared`, `PreparedData`, `Sample`, `collate`
    vocab_counts   loss-token counts -> d2t/t2d + coverage table (`draft_vocab`)
"""
