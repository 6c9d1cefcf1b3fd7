"""`eagle3kit report`: report.md and a self-contained report.html from the runs' JSON
artefacts (render.py), with the game plan priced from measured curves and PNG plots (plots.py)."""

from eagle3kit.report.render import report

__all__ = ["report"]
