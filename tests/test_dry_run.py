"""`train --dry-run`: a plan from headers, nothing written, exit 0; `--json` the same document
(kind eagle3kit.train_plan). The plan's count of the unroll's activations agrees with the bytes
autograd keeps (a live-tensor tracker, small shapes); a Kimi-K2-shaped target (config only)
and MLA drafter (sparse headers) are planned without torch being imported at all."""

from __future__ import annotations

import json
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
from test_train_helpers import tiny_data, tiny_target, train_args

# Kimi-K2's text config (moonshotai/Kimi-K2-Instruct config.json): the keys the demo's
# K2.5-shaped config lacks, for a count of its parameters from the config alone
K2_EXTRA = {
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "tie_word_embeddings": False,
}


def k2_case(tmp: Path, samples: int = 64) -> tuple[Path, Path, Path]:
    """(a Kimi-K2.5-shaped target config dir, the sparse K2.5 MLA drafter, a DATA dir of
    synthetic token ids in its vocabulary): headers only, a few MB on disk."""
    import torch

    from eagle3kit.checkpoint.eagle3.synthetic import kimi_k25_mla_spec, write_sparse_drafter
    from eagle3kit.data.prepared import PreparedWriter
    from eagle3kit.demo.prologue import k25_target_config

    target = k25_target_config(tmp / "k25-config")
    cfg = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**cfg, **K2_EXTRA}))
    drafter = write_sparse_drafter(tmp / "k25-mla", kimi_k25_mla_spec())
    g = torch.Generator().manual_seed(0)
    w = PreparedWriter(tmp / "k25-data")
    for i in range(samples):
        n = int(torch.randint(200, 2000, (1,), generator=g))
        ids = torch.randint(0, 163840, (n,), generator=g).tolist()
        w.add(f"s{i}", ids, [j > n // 3 for j in range(n)])
    w.finish({"target": {"name_or_path": "kimi-k2.5", "vocab_size": 163840}})
    return target, drafter, tmp / "k25-data"


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM (Linux)")
def test_k2_plan_reads_headers_only_and_imports_no_torch(tmp_path):
    """The plan of a Kimi-K2.5 MLA fine-tune: the drafter's shape from its header, the
    target's 1T parameters from its config, and a process that never imported torch (so no
    tensor of the model was allocated) and peaked far below the drafter's own weights."""
    target, drafter, data = k2_case(tmp_path)
    out = tmp_path / "run"
    args = [
        "train",
        "--target",
        target,
        "--data",
        data,
        "--init-from",
        drafter,
        "-o",
        out,
        "--dry-run",
        "--json",
        "--max-len",
        "2048",
        "--batch-size",
        "4",
    ]
    code = (
        "import sys\n"
        "def hwm():  # this process's peak RSS since exec (kB); ru_maxrss keeps the parent's\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmHWM:'):\n"
        "            return int(line.split()[1])\n"
        "from eagle3kit.cli import main\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "finally:\n"
        "    print('torch' in sys.modules, hwm(),"
        " file=sys.stderr)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    torch_loaded, peak_kib = r.stderr.strip().splitlines()[-1].split()
    doc = json.loads(r.stdout)
    assert doc["kind"] == "eagle3kit.train_plan" and doc["schema"] == 1
    d = doc["drafter"]
    assert (d["attention"], d["hidden_size"], d["draft_vocab_size"]) == ("mla", 7168, 163840)
    assert d["kv_lora_rank"] == 512 and d["init"] == str(drafter)
    assert doc["target"]["params_from"] == "config" and doc["target"]["params"] > 1e12
    weights = doc["memory"]["drafter_weights"]
    assert weights > 4 * 2**30  # the MLA drafter alone: > 4 GiB in float32
    assert torch_loaded == "False" and int(peak_kib) * 1024 < weights / 8
    assert doc["time"]["measured"] is False and doc["time"]["total_s"] > 0
    assert not out.exists()


@pytest.mark.slow
def test_a_dry_run_writes_nothing_and_prints_the_plan(tmp_path, cli):
    out = tmp_path / "run"
    args = train_args(out, tiny_data(), tiny_target(), "--steps", "4", "--dry-run")
    r = cli(*args)
    assert r.code == 0, r.err[-2000:]
    assert "memory per rank:" in r.out and "time per step (measured here at lengths" in r.out
    assert not out.exists()
    r = cli(*args, "--json")
    assert r.code == 0, r.err[-2000:]
    doc = json.loads(r.out)
    assert doc["kind"] == "eagle3kit.train_plan" and doc["schedule"]["steps"] == 4
    assert doc["time"]["measured"] and doc["time"]["drafter_step_s"] > 0
    from eagle3kit.train.dry_run_memory import TRANSIENT

    m = doc["memory"]
    held = sum(v for k, v in m.items() if k not in ("peak", "available", "fits", *TRANSIENT))
    assert m["peak"] == held + max(m[k] for k in TRANSIENT)
    assert doc["time"]["step_cpu_s"] > 0 and len(doc["time"]["at_lengths"]) >= 1
    assert doc["parameters"]["trainable"] > 0 and doc["drafter"]["draft_vocab_size"] == 96
    assert not out.exists()


def test_a_method_the_plan_does_not_count_is_one_line(tmp_path, cli):
    args = train_args(tmp_path / "r", tiny_data(), tiny_target(), "--method", "dflash")
    r = cli(*args, "--dry-run")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert "--dry-run: expected a method the plan counts" in r.err


class _Live:
    """Bytes of live tensor storages (each counted once) and their peak, while active: what
    the forward allocates and what autograd keeps."""

    def __init__(self):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        tracker = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in out if isinstance(out, tuple | list) else [out]:
                    if isinstance(t, torch.Tensor):
                        tracker.add(t)
                return out

        self.mode, self.live, self.peak, self.seen = Mode(), 0, 0, {}

    def add(self, t):
        from torch.multiprocessing.reductions import StorageWeakRef

        st = t.untyped_storage()
        key = StorageWeakRef(st).cdata
        if key in self.seen:
            return
        self.seen[key] = st.nbytes()
        self.live += st.nbytes()
        self.peak = max(self.peak, self.live)
        weakref.finalize(st, self.drop, key)

    def drop(self, key):
        self.live -= self.seen.pop(key, 0)


def _drafter(attention: str, heads: int, kv_heads: int, vd: int):
    import torch

    from eagle3kit.core.spec import spec_for_target
    from eagle3kit.model.drafter import Eagle3Drafter

    cfg = {
        "hidden_size": 128,
        "num_hidden_layers": 8,
        "vocab_size": 4096,
        "head_dim": 32,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_size": 352,
    }
    if attention == "mla":
        cfg.update(
            q_lora_rank=48,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=16,
            model_type="deepseek_v3",
        )
    spec = spec_for_target(cfg, attention=attention, draft_vocab_size=vd).replace(dtype="float32")
    torch.manual_seed(0)
    m = Eagle3Drafter(spec)
    m.set_embedding(torch.randn(4096, 128))
    with torch.no_grad():
        m.d2t.zero_()
        m.t2d.zero_()
        m.t2d[:vd] = True
    return m


def _features(b: int, t: int, vd: int, frac: float = 0.6):
    import torch

    from eagle3kit.data.features import Features

    g = torch.Generator().manual_seed(1)
    return Features(
        input_ids=torch.randint(0, 4096, (b, t), generator=g),
        attention_mask=torch.ones(b, t, dtype=torch.bool),
        loss_mask=torch.rand(b, t, generator=g) < frac,
        aux=torch.randn(b, t, 384, generator=g),
        target_argmax=torch.randint(0, vd, (b, t), generator=g),
        teacher_ids=torch.arange(vd).expand(b, t, vd),
        teacher_logp=torch.randn(b, t, vd, generator=g).log_softmax(-1),
    )


@pytest.mark.parametrize(
    ("attention", "heads", "kv_heads", "vd", "k", "t"),
    [("mha", 2, 2, 2048, 7, 96), ("mha", 4, 1, 1024, 4, 64), ("mla", 2, 2, 2048, 5, 96)],
)
def test_the_unroll_activations_match_what_autograd_keeps(attention, heads, kv_heads, vd, k, t):
    """The plan's count (train/dry_run_memory.py) within 15% of the live bytes after the
    unroll's forward, and of their peak (the transient logits) before the backward."""
    from eagle3kit.train.dry_run_memory import ttt_floats
    from eagle3kit.train.ttt import loss_positions, ttt_bias, ttt_loss

    m, f, b = _drafter(attention, heads, kv_heads, vd), _features(4, t, vd), 4
    ttt_bias.cache_clear()
    live = _Live()
    with live.mode:
        norm = loss_positions(m.t2d, f, k).clamp(min=1)
        loss, _ = ttt_loss(m, f, k, norm=norm, counts=False)
        kept, peak = live.live, live.peak
    counted = 4 * ttt_floats(m.spec, k, t, cpu=True) * b * t
    assert abs(counted / kept - 1) < 0.15, (counted, kept)
    assert abs((counted + 4 * 2 * vd * b * t) / peak - 1) < 0.15, (counted, peak)
    assert loss.requires_grad


def test_the_cod_pass_activations_match_what_autograd_keeps():
    import torch

    from eagle3kit.methods.peagle.model import PEagleDrafter
    from eagle3kit.methods.peagle.train import cod_loss
    from eagle3kit.train.dry_run_memory import cod_elements, peagle_floats

    vd, k, t, b = 2048, 5, 128, 2
    m = PEagleDrafter.from_eagle3(_drafter("mha", 2, 2, vd), 0, seed=0)
    f = _features(b, t, vd)
    live = _Live()
    with live.mode:
        s, n = cod_loss(m, f, k, gen=torch.Generator().manual_seed(0))
        kept, peak = live.live, live.peak
    el = cod_elements(t, k, 0.6, 0.7, 0.2)
    counted = 4 * b * (el * peagle_floats(m.spec, el, True, vd, 384) + t * vd)
    assert abs(counted / kept - 1) < 0.15, (counted, kept)
    assert abs((counted + 4 * 2 * el * vd) / peak - 1) < 0.15, (counted, peak)
    assert s.requires_grad and n > 0


def test_a_step_over_the_run_lengths_follows_the_two_measured_points():
    """cost(T) = a*T + c*T^2 through (100, 1 s) and (200, 3 s): a = 0.005, c = 5e-5, by hand;
    its mean over lengths 100, 150, 200 is (1 + 1.875 + 3) / 3."""
    from eagle3kit.train.dry_run_step import over_lengths

    assert abs(over_lengths({100: 1.0, 200: 3.0}, [100, 150, 200]) - 5.875 / 3) < 1e-12
    assert over_lengths({100: 2.0}, [50, 150]) == 2.0  # one point: cost scales with T
    assert over_lengths({100: 3.0, 200: 4.0}, [300]) == 7.0 / 300 * 300  # bends down: linear
