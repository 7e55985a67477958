"""The JupyterLab extension (labextension/): its contract with the Python payload, its build
hook (which must never break installing nbxla), its built output, and its JavaScript checks.

The browser side is exercised for real in test_browser.py; here nothing needs a browser.
Checks that need Node.js or a built extension skip with the reason when those are absent.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nbxla.compiler import compile_module
from nbxla.hlo.parser import parse_hlo
from nbxla.jupyter import display as views

REPO = Path(__file__).resolve().parents[2]
LABEXT = REPO / "labextension"
BUILT = REPO / "nbxla" / "labextension"

HLO = """HloModule contract

ENTRY %main (x: f32[64], y: f32[64]) -> f32[] {
  %x = f32[64]{0} parameter(0)
  %y = f32[64]{0} parameter(1)
  %m = f32[64]{0} multiply(f32[64]{0} %x, f32[64]{0} %x), metadata={source_file="cell.py" source_line=2}
  %a = f32[64]{0} add(f32[64]{0} %m, f32[64]{0} %y), metadata={source_file="cell.py" source_line=3}
  %zero = f32[] constant(0), metadata={source_file="cell.py" source_line=4}
  ROOT %s = f32[] reduce(f32[64]{0} %a, f32[] %zero), dimensions={0}, to_apply=%sum, metadata={source_file="cell.py" source_line=4}
}

%sum (p: f32[], q: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  %q = f32[] parameter(1)
  ROOT %r = f32[] add(f32[] %p, f32[] %q)
}
"""


def _hook():
    spec = importlib.util.spec_from_file_location("nbxla_labext_hook", LABEXT / "hatch_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- the contract: what the renderer reads is what StageView writes --------------------------

def test_renderer_and_python_agree_on_the_mimetype():
    source = (LABEXT / "src" / "index.ts").read_text()
    assert f"MIME_TYPE = '{views.MIMETYPES['stages']}'" in source


def test_payload_carries_what_the_renderer_reads():
    payload = views.StageView(compile_module(parse_hlo(HLO), "cpu")).to_json()
    json.dumps(payload)                                            # plain JSON
    for key in ("name", "backend", "device", "timings_ms", "stage_order", "stages", "truncated",
                "kernels_before", "kernels_after", "kernels", "refusals", "source"):
        assert key in payload, key
    assert set(payload["stage_order"]) <= set(payload["stages"])
    assert {"hlo", "passes", "optimized_hlo", "optimized_hlo_dot", "fusion_report"} <= set(payload["stages"])
    assert payload["kernels"], "one fused kernel expected"
    for k in payload["kernels"]:
        assert re.fullmatch(r"#[0-9a-fA-F]{3,8}", k["color"])     # the renderer drops other colors
        for field in ("index", "name", "kind", "ops", "computation", "flops", "bytes_read",
                      "bytes_written", "lines"):
            assert field in k, field
    assert payload["source"]["file"] == "cell.py"
    lines = payload["source"]["lines"]
    assert [entry["line"] for entry in lines] == [2, 3, 4]
    assert all(entry["kernels"] for entry in lines)
    # Hovering a source line finds its HLO through the instructions' metadata, and its
    # kernel through the fused computation's name: both must be in the optimized HLO text.
    optimized = payload["stages"]["optimized_hlo"]
    for n in (2, 3, 4):
        assert re.search(rf'source_file="cell.py" source_line={n}\b', optimized)
    for k in payload["kernels"]:
        assert f"%{k['name']} = " in optimized
        if k["computation"]:
            assert re.search(rf"^%{re.escape(k['computation'])} \(.*\{{$", optimized, re.M)
    # The diff offers the module after each pass: the passes stage marks them so.
    assert re.search(r"^// ---- after \S+ \((changed|no change)", payload["stages"]["passes"], re.M)


def test_extension_package_metadata():
    package = json.loads((LABEXT / "package.json").read_text())
    assert package["jupyterlab"]["mimeExtension"] is True
    assert package["jupyterlab"]["outputDir"] == "../nbxla/labextension"
    pyproject = (REPO / "pyproject.toml").read_text()
    assert f'"nbxla/labextension" = "share/jupyter/labextensions/{package["name"]}"' in pyproject


# ---- the build hook never fails the Python build ----------------------------------------------

def _sources(tmp_path) -> tuple[Path, Path]:
    source = tmp_path / "labextension"
    (source / "src").mkdir(parents=True)
    (source / "src" / "index.ts").write_text("export default {};\n")
    (source / "package.json").write_text('{"name": "x"}\n')
    return source, tmp_path / "out"


def test_hook_skips_when_asked(tmp_path, monkeypatch):
    hook = _hook()
    source, out = _sources(tmp_path)
    monkeypatch.setenv("NBXLA_SKIP_LABEXTENSION", "1")
    monkeypatch.setattr(hook.subprocess, "run", lambda *a, **k: pytest.fail("npm must not run"))
    hook.build_labextension("wheel", "standard", path=str(source), output=str(out))
    assert not out.exists()


def test_hook_without_node_warns_and_installs_anyway(tmp_path, monkeypatch):
    hook = _hook()
    source, out = _sources(tmp_path)
    monkeypatch.delenv("NBXLA_SKIP_LABEXTENSION", raising=False)
    monkeypatch.setattr(hook.shutil, "which", lambda name: None)
    with pytest.warns(UserWarning, match="without its JupyterLab extension"):
        hook.build_labextension("wheel", "editable", path=str(source), output=str(out))
    assert not out.exists()


@pytest.mark.skipif(sys.platform == "win32", reason="uses a shell script as a fake npm")
def test_hook_when_npm_fails_removes_partial_output(tmp_path, monkeypatch):
    hook = _hook()
    source, out = _sources(tmp_path)
    (out / "static").mkdir(parents=True)
    (out / "package.json").write_text("{}")                      # a half-written build
    fake = tmp_path / "npm"
    fake.write_text("#!/bin/sh\necho 'npm ERR! registry unreachable' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.delenv("NBXLA_SKIP_LABEXTENSION", raising=False)
    monkeypatch.setattr(hook.shutil, "which", lambda name: str(fake) if name == "npm" else "/usr/bin/node")
    with pytest.warns(UserWarning, match="npm build failed"):
        hook.build_labextension("wheel", "standard", path=str(source), output=str(out))
    assert not out.exists()


# ---- the built extension (when Node.js was there to build it) ---------------------------------

def _require_built():
    if not (BUILT / "package.json").is_file():
        pytest.skip("the extension is not built (no Node.js at install time, or NBXLA_SKIP_LABEXTENSION)")


def test_built_extension_is_complete():
    _require_built()
    meta = json.loads((BUILT / "package.json").read_text())
    assert meta["name"] == "nbxla-labextension"
    build = meta["jupyterlab"]["_build"]
    assert (BUILT / build["load"]).is_file()
    assert build.get("mimeExtension")
    assert json.loads((BUILT / "install.json").read_text())["packageName"] == "nbxla"
    # Graphviz (WebAssembly) is its own chunk, loaded on first use, not with the entry point.
    sizes = sorted(p.stat().st_size for p in (BUILT / "static").glob("*.js"))
    assert (BUILT / build["load"]).stat().st_size < 100_000
    assert sizes[-1] > 300_000


def test_javascript_checks():
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed")
    if not (LABEXT / "lib" / "diff.js").is_file():
        pytest.skip("labextension/lib is not built (npm run build:lib)")
    for test in sorted((LABEXT / "test").glob("*.test.mjs")):
        out = subprocess.run([node, "--experimental-detect-module", "--no-warnings", str(test)],
                             capture_output=True, text=True, timeout=60, cwd=LABEXT)
        assert out.returncode == 0, f"{test.name}:\n{out.stdout}\n{out.stderr}"
