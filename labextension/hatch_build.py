"""Build the JupyterLab extension while hatchling builds nbxla (through hatch-jupyter-builder).

``pyproject.toml`` names ``build_labextension`` as hatch-jupyter-builder's build function.
It runs ``npm ci`` (first time only) and ``npm run build:prod`` in ``labextension/``, which
writes the prebuilt (federated) extension to ``nbxla/labextension/``; the wheel ships that
directory as ``share/jupyter/labextensions/nbxla-labextension``.

This step never fails the Python build.  Without Node.js, with the build switched off
(``NBXLA_SKIP_LABEXTENSION=1``), or when npm fails (no network, a registry without a
package), it warns and nbxla installs without the extension: notebooks then show the
HTML every display object carries.  A half-built output is removed rather than shipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

PACKAGE_NAME = "nbxla-labextension"
INSTALL_JSON = {
    "packageManager": "python",
    "packageName": "nbxla",
    "uninstallInstructions": "Use your Python package manager (pip, conda, ...) to uninstall nbxla",
}


def _say(message: str) -> None:
    print(f"[nbxla labextension] {message}", file=sys.stderr, flush=True)


def _newest_mtime(paths) -> float:
    newest = 0.0
    for path in paths:
        if path.is_file():
            newest = max(newest, path.stat().st_mtime)
        elif path.is_dir():
            for p in path.rglob("*"):
                if p.is_file():
                    newest = max(newest, p.stat().st_mtime)
    return newest


def _built(output: Path) -> bool:
    """Whether ``output`` holds a complete build (its entry point exists)."""
    try:
        meta = json.loads((output / "package.json").read_text())
        return (output / meta["jupyterlab"]["_build"]["load"]).is_file()
    except (OSError, ValueError, KeyError, TypeError):
        return False


def build_labextension(target_name: str, version: str, path: str = "labextension",
                       output: str = "nbxla/labextension", timeout: str = "600") -> None:
    source, out = Path(path).resolve(), Path(output).resolve()
    inputs = [source / "src", source / "style", source / "package.json", source / "tsconfig.json"]
    if os.environ.get("NBXLA_SKIP_LABEXTENSION", "").lower() in ("1", "true", "yes"):
        _say("skipped (NBXLA_SKIP_LABEXTENSION is set)")
        return
    if not (source / "package.json").is_file():
        _say(f"no sources at {source}: shipping {'the prebuilt extension' if _built(out) else 'no extension'}")
        return
    if _built(out) and (out / "package.json").stat().st_mtime >= _newest_mtime(inputs):
        _write_install_json(out)
        _say("up to date")
        return
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        _warn("Node.js (node and npm) not found")
        return
    limit = float(timeout)
    try:
        lock = source / "node_modules" / ".package-lock.json"
        if not lock.is_file() or lock.stat().st_mtime < (source / "package.json").stat().st_mtime:
            install = "ci" if (source / "package-lock.json").is_file() else "install"
            _say(f"npm {install} in {source} (first build only)")
            subprocess.run([npm, install, "--no-audit", "--no-fund", "--fetch-retries=1"],
                           cwd=source, check=True, timeout=limit)
        _say("npm run build:prod")
        subprocess.run([npm, "run", "build:prod"], cwd=source, check=True, timeout=limit)
        if not _built(out):
            raise RuntimeError(f"the build finished but {out} holds no extension")
        _write_install_json(out)
        _say(f"built into {out}")
    except (OSError, subprocess.SubprocessError, RuntimeError) as e:
        shutil.rmtree(out, ignore_errors=True)
        _warn(f"the npm build failed ({e})")


def _write_install_json(out: Path) -> None:
    """What `jupyter labextension list` says about where the extension came from."""
    (out / "install.json").write_text(json.dumps(INSTALL_JSON, indent=2) + "\n")


def _warn(reason: str) -> None:
    message = (f"{reason}: nbxla installs without its JupyterLab extension; notebooks show the "
               f"HTML fallback. Install Node.js >= 20 and reinstall to get {PACKAGE_NAME}, or set "
               f"NBXLA_SKIP_LABEXTENSION=1 to skip this step quietly.")
    _say(message)
    warnings.warn(message, stacklevel=2)
