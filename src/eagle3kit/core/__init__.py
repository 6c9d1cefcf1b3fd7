"""The torch-free core every layer stands on: errors (one line, exit 2), atomic writes,
progress callbacks, the environment record, DraftSpec and the d2t/t2d vocabulary rules.
Nothing here imports torch at import time (tests/test_layers.py checks it)."""
