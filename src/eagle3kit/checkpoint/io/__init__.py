"""Generic checkpoint I/O: bounds-checked safetensors headers, checkpoints described by their
headers (files, sharded folders, Hub repos), reading single tensors, writing safetensors
(sparse, or assembled byte for byte from other files). No method's format lives here."""
