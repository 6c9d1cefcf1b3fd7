"""Drafter and target checkpoints, from headers (nothing here imports torch at import time).

io/         generic safetensors I/O (headers, checkpoints, tensors, writes, Hub files)
eagle3/     EAGLE-3's own format: layouts, reader, writers, checker, compat, convert
engines/    the engines' rules by release, as data with sources
compat.py, inspection.py, methods.py    the verbs, dispatching to each method's
            checkpoint part (methods/<package>/checkpoint, through core/registry.py)
"""
