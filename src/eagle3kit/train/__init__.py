"""Drafter training: the training-time test (ttt), the loop, checkpoints/resume, warm start,
torchrun + FSDP2. Import the submodules (they import torch)."""
