"""Context length as a dimension of eval and bench (measure/by_length.py), on tiny zoo
members: buckets partition the positions, the online buckets replay offline, the JSON
contracts, `plan --from` on a real `bench --context-lengths` file."""

from __future__ import annotations

import json

import pytest
import torch
from decode_helpers import new_drafter, save_drafter_dir


@pytest.fixture(scope="module")
def member():
    from eagle3kit import zoo

    torch.set_num_threads(1)
    return str(zoo.get("dsv3-v1", size="tiny"))


@pytest.fixture(scope="module")
def k2():
    """The demo's tiny K2 drafter, trained on dsv3-v1-tiny: it accepts something there."""
    from eagle3kit.zoo.shipping import shipped

    return str(shipped("k2-drafter-tiny"))


@pytest.mark.slow
def test_buckets_partition_every_count(member):
    """Counted per bucket, [0, 40) and [40, inf) add up to the whole run, count for count."""
    from eagle3kit.data.features import compute_features
    from eagle3kit.data.prepared import Sample, collate
    from eagle3kit.measure.by_length import position_sets
    from eagle3kit.model.target import TargetModel
    from eagle3kit.train.ttt import counts_by_position, ttt_counts

    tm = TargetModel.from_pretrained(member)
    d = new_drafter(tm, seed=3)
    rows = []
    for i, text in enumerate(["def f(x):\n    return x" * 6, "import os\n" * 12, "class A:\n" * 9]):
        ids = torch.tensor(tm.tokenizer(text)["input_ids"][:70])
        mask = torch.zeros_like(ids, dtype=torch.bool)
        mask[10 + 5 * i :] = True
        rows.append(Sample(str(i), ids, mask))
    f = compute_features(tm, *collate(rows), d.d2t)
    whole = ttt_counts(d, f, 3)
    low, high, every = counts_by_position(d, f, 3, position_sets(f.loss_mask, (0, 40)))
    for name in ("hits", "counted", "chain", "chain_prev", "walk_ge"):
        total = getattr(low, name) + getattr(high, name)
        assert torch.equal(total, getattr(whole, name)), name
        assert torch.equal(getattr(every, name), getattr(whole, name)), name
    assert low.walk_n[0] > 0 and high.walk_n[0] > 0
    assert low.walk_n[0] + high.walk_n[0] == whole.walk_n[0]


@pytest.mark.slow
def test_online_buckets_replay_offline_and_lossless(member, k2):
    """Per bucket, the offline walk on the target's own answers equals decoding."""
    from eagle3kit.data.long_prompts import long_prompts
    from eagle3kit.measure.by_length import online_by_length
    from eagle3kit.model.loading import load_pair

    tm, d = load_pair(member, k2)
    ps, src = long_prompts(tm.tokenizer, (96, 300), 2, which="B", new_tokens=20)
    doc = online_by_length(tm, d, ps, 3, max_new_tokens=20, repeats=1, source=src)
    assert doc["kind"] == "eagle3kit.eval" and doc["mode"] == "online"
    assert doc["lengths"] == [96, 300] and doc["prompt_source"] == src
    cycles = 0
    for e in doc["by_length"]:
        assert e["prompts"] == 2 and e["lossless"] is True
        assert e["offline_same_answers"]["cycles"] == e["cycles"]
        assert e["offline_same_answers"]["tau_walk"] == pytest.approx(e["tau_online"], abs=1e-9)
        assert e["tau_online"] == pytest.approx(1 + sum(e["per_position_acceptance"]))
        cycles += e["cycles"]
    assert cycles == doc["cycles"]  # the buckets hold every cycle of the run
    assert sum(e["cycles"] * (e["tau_online"] - 1) for e in doc["by_length"]) > 0


@pytest.mark.slow
def test_eval_by_length_offline_and_refusals(cli, member, tmp_path):
    from eagle3kit.model.target import TargetModel

    d = save_drafter_dir(new_drafter(TargetModel.from_pretrained(member)), tmp_path / "d")
    rows = [
        {
            "messages": [
                {"role": "user", "content": "Write f."},
                {"role": "assistant", "content": "def f():\n" * 20},
            ]
        }
        for _ in range(3)
    ]
    data = tmp_path / "c.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    base = ("eval", "--target", member, "--drafter", d, "--depth", "2")
    r = cli(*base, "--data", str(data), "--by-length", "0,16,64", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert [e["context_length"] for e in doc["by_length"]] == [0, 16, 64]
    assert [e["range"] for e in doc["by_length"]] == [[0, 16], [16, 64], [64, None]]
    assert sum(e["cycles"] for e in doc["by_length"]) == doc["cycles"]
    r = cli(*base, "--data", str(data), "--by-length", "--json")  # the default buckets
    assert r.code == 0, r.err
    assert json.loads(r.out)["lengths"] == [128, 512, 1024, 2048]
    r = cli(*base, "--online", "--by-length", "128,2048", "--max-new-tokens", "8")
    assert r.code == 2 and "max_position_embeddings 2048" in r.err
    r = cli(*base, "--by-length", "64")
    assert r.code == 2 and "expected --data" in r.err


@pytest.mark.slow
def test_bench_context_lengths_and_plan(cli, member, k2, tmp_path):
    r = cli(
        "bench",
        "--target",
        member,
        "--drafter",
        k2,
        "--context-lengths",
        "96,256",
        "--prompts",
        "2",
        "--max-new-tokens",
        "12",
        "--repeats",
        "1",
        "--prompt-set",
        "A",
        "--json",
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["kind"] == "eagle3kit.bench" and doc["lengths"] == [96, 256]
    assert doc["prompts"] == 4 and "set A" in doc["prompt_source"]
    for e in doc["by_length"]:
        assert e["prompts"] == 2
        rows = {m["name"]: m for m in e["methods"]}
        assert rows["chain"]["same_tokens_as_greedy"] is True
        assert rows["chain"]["prefill_ms"] > 0 and rows["greedy"]["prefill_ms"] > 0
        (lv,) = e["costs"]["levels"]
        assert lv["concurrency"] == 1 and lv["pass_ms"]["eagle3"] > 0
    path = tmp_path / "bench.json"
    path.write_text(r.out)
    p = cli("plan", "--from", str(path), "--json")
    assert p.code in (0, 1), p.err
    plan = json.loads(p.out)
    taus = [m["tau_online"] for e in doc["by_length"] for m in e["methods"] if m["name"] == "chain"]
    assert [x["tau"] for x in plan["by_length"]] == pytest.approx(taus, abs=1e-6)
    assert plan["pays_up_to"]["measured_up_to"] == 256


@pytest.mark.slow
def test_probe_by_length_on_new_and_old(cli, k2):
    """The K2 drafter (trained on v1) by context length on v2 and on v1."""
    from eagle3kit import zoo

    new, old = (str(zoo.get(m, size="tiny")) for m in ("dsv3-v2", "dsv3-v1"))
    r = cli(
        "probe",
        "--drafter",
        k2,
        "--target",
        new,
        "--reference-target",
        old,
        "--samples",
        "4",
        "--online-prompts",
        "2",
        "--max-new-tokens",
        "12",
        "--by-length",
        "96,200",
        "--json",
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["kind"] == "eagle3kit.probe" and doc["lengths"] == [96, 200]
    for e in doc["by_length"]:
        t = e["tau"]
        assert 1.0 <= t["new"] <= 4.0 and 1.0 <= t["reference"] <= 4.0
        pp = e["per_position_acceptance"]
        assert t["new"] == pytest.approx(1 + sum(pp["new"]))
        if t["reference"] > 1:
            assert e["retention"] == pytest.approx((t["new"] - 1) / (t["reference"] - 1))
    text = cli("probe", "--drafter", k2, "--features-new", "/nonexistent", "--by-length", "96")
    assert text.code == 2 and "--by-length" in text.err
