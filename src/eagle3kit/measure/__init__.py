"""Measurements: offline and online evaluation (evaluate.py), bench (bench.py), the Phase 0
probe (probe.py) and hidden-state similarity (similarity.py)."""
