"""A real browser on a real JupyterLab: demo 1 runs, and the stage viewer, chart and cache table
show; demo 11 runs, and its profiles show their per-line time bars and the roofline.

JupyterLab runs headless from this Python (its own config/data/runtime/settings directories
under ``tmp_path``; a random port, no token), serving a copy of
``demo_notebooks/01_running_example.ipynb``.  Debian's ``chromium`` — never a downloaded
browser — is driven by Python Playwright: open the notebook, wait for the kernel (the status
bar's "| Idle"), run all cells, then check

* the stage viewer: nbxla's JupyterLab extension (``.nbxla-stages``: tabs, hovering a source
  line lights its HLO instructions, the diff tab, the graph drawn with Graphviz in
  WebAssembly) when ``nbxla-labextension`` is installed in this environment, else the HTML
  fallback every display object carries;
* the speedup chart (an ``<img>`` in the ``%%xla --compare`` output);
* the cache table (``%xla_cache``; appended to the copy when the demo has no such cell).

A screenshot is kept under ``tmp_path/artifacts`` (and copied to ``$NBXLA_TEST_ARTIFACTS``
when that is set); its path is printed (``pytest -s`` shows it).  Skipped with the reason
when chromium, playwright or jupyterlab is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "demo_notebooks" / "01_running_example.ipynb"
DEMO_PROFILE = REPO / "demo_notebooks" / "11_why_not_faster.ipynb"
CHROMIUM = os.environ.get("NBXLA_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run"]
BUDGET_S = 60


def _requirements():
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium; or set NBXLA_CHROMIUM)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    pytest.importorskip("jupyterlab", reason="jupyterlab is not installed (pip install 'nbxla[lab]')")
    pytest.importorskip("ipykernel", reason="ipykernel is not installed")


def _extension_installed(env) -> bool:
    """Whether JupyterLab (this Python's, with the test's config) will load nbxla-labextension."""
    out = subprocess.run([sys.executable, "-m", "jupyter", "labextension", "list"],
                         capture_output=True, text=True, timeout=60, env=env)
    return re.search(r"nbxla-labextension\s+v\S+\s+(\x1b\[\d+m)?enabled", out.stdout + out.stderr) is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _notebook_copy(directory: Path, demo: Path = DEMO) -> tuple[str, bool]:
    """A demo (1 unless told) copied into ``directory``; demo 1 with a ``%xla_cache`` cell
    added if it has none."""
    nb = json.loads(demo.read_text())
    if demo != DEMO:
        (directory / demo.name).write_text(json.dumps(nb))
        return demo.name, False
    has_cache = any("%xla_cache" in "".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    if not has_cache:
        nb["cells"].append({"cell_type": "code", "execution_count": None, "id": "nbxla-test-cache",
                            "metadata": {}, "outputs": [], "source": ["%xla_cache"]})
    (directory / DEMO.name).write_text(json.dumps(nb))
    return DEMO.name, not has_cache


@pytest.fixture
def jupyterlab(tmp_path, request):
    """JupyterLab serving a copy of demo 1 (or of the demo a test passes as ``indirect``)."""
    _requirements()
    root = tmp_path / "notebooks"
    root.mkdir()
    name, _ = _notebook_copy(root, getattr(request, "param", DEMO))
    env = dict(os.environ)
    for var, sub in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                     ("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTERLAB_SETTINGS_DIR", "settings"),
                     ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"), ("IPYTHONDIR", "ipython")]:
        env[var] = str(tmp_path / sub)
    # No "official Jupyter news?" toast over the screenshots.  NBXLA_BROWSER_FALLBACK=1
    # also switches nbxla's extension off, to check the HTML fallback in a real browser.
    disabled = {"@jupyterlab/apputils-extension:announcements": True}
    if os.environ.get("NBXLA_BROWSER_FALLBACK") == "1":
        disabled["nbxla-labextension"] = True
    labconfig = tmp_path / "config" / "labconfig"
    labconfig.mkdir(parents=True)
    (labconfig / "page_config.json").write_text(json.dumps({"disabledExtensions": disabled}))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    port = _free_port()
    log = open(tmp_path / "jupyterlab.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--port={port}",
         "--ip=127.0.0.1", f"--ServerApp.root_dir={root}", "--IdentityProvider.token=",
         "--ServerApp.password=", "--LabApp.expose_app_in_browser=True",
         "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail("JupyterLab did not start:\n" + (tmp_path / "jupyterlab.log").read_text()[-3000:])
                time.sleep(0.2)
        yield url, name, env
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def test_demo_1_in_jupyterlab(jupyterlab, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    url, name, env = jupyterlab
    start = time.monotonic()
    extension = _extension_installed(env)
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            console_errors = []
            page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
            page.goto(f"{url}/lab/tree/{name}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=30_000)
            # The kernel is ready when the status bar says "| Idle" (the toolbar's indicator
            # goes idle before the kernel has connected).
            expect(page.locator(".jp-StatusBar-Widget", has_text=re.compile(r"\| Idle"))
                   .first).to_be_visible(timeout=30_000)
            page.wait_for_function("() => window.jupyterapp !== undefined", timeout=10_000)
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")

            # Every code cell has run (an execution count, not "[*]" or "[ ]"), without errors.
            page.wait_for_function(
                """() => {
                    const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')];
                    return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
                }""", timeout=45_000)
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                                  has_text="Traceback")
            assert errors.count() == 0, errors.first.inner_text()

            # The speedup chart: an image in the --compare output.
            chart = page.locator(".jp-OutputArea-output img").first
            expect(chart).to_be_attached()
            assert chart.evaluate("img => img.naturalWidth") > 100

            # The cache table.
            cache = page.locator(".jp-OutputArea-output table", has_text="why compiled").first
            expect(cache).to_be_attached()
            assert cache.locator("tbody tr").count() >= 1

            # The stage viewer.
            if extension:
                viewer = page.locator(".nbxla-stages").first
                expect(viewer).to_be_attached()
                viewer.scroll_into_view_if_needed()
                expect(viewer.locator(".nbxla-tab", has_text="optimized_hlo").first).to_be_visible()
                expect(viewer.locator(".nbxla-kernel-count")).to_have_text("1")
                # Hover a source line that became part of a kernel: its HLO lights up.
                line = viewer.locator(".nbxla-src-line[data-kernels]").first
                line.hover()
                assert viewer.locator(".nbxla-hlo-line.nbxla-hot").count() >= 1
                assert viewer.locator(".nbxla-legend-item.nbxla-hot").count() == 1
                page.screenshot(path=str(artifacts / "demo1-stage-viewer.png"), full_page=False)
                # The graph, drawn in the browser.
                viewer.locator(".nbxla-tab[data-stage='optimized_hlo_dot']").click()
                graph = viewer.locator("img.nbxla-graph")
                expect(graph).to_be_visible(timeout=15_000)
                assert graph.evaluate("img => img.naturalWidth") > 50
                graph.scroll_into_view_if_needed()
                page.screenshot(path=str(artifacts / "demo1-graph.png"), full_page=False)
                # A diff between two stages.
                viewer.locator(".nbxla-tab[data-stage='__diff__']").click()
                expect(viewer.locator(".nbxla-diff .nbxla-diff-add").first).to_be_attached()
                page.screenshot(path=str(artifacts / "demo1-diff.png"), full_page=False)
            else:
                viewer = page.locator(".jp-OutputArea-output details summary", has_text="optimized_hlo").first
                expect(viewer).to_be_attached()
                viewer.scroll_into_view_if_needed()
                page.screenshot(path=str(artifacts / "demo1-stage-viewer-html.png"), full_page=False)
            ours = [e for e in console_errors if "nbxla" in e]
            assert not ours, ours
        finally:
            browser.close()
    shots = sorted(artifacts.glob("*.png"))
    keep = os.environ.get("NBXLA_TEST_ARTIFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for shot in shots:
            shutil.copy(shot, Path(keep) / shot.name)
    print(f"\nbrowser test ({'extension' if extension else 'HTML fallback'}): screenshots "
          + ", ".join(str(s) for s in shots))
    elapsed = time.monotonic() - start
    assert elapsed < BUDGET_S, f"took {elapsed:.0f} s"


PROFILE_BUDGET_S = 150


def _open_and_run_all(page, url: str, name: str, timeout_ms: int) -> None:
    """Open the notebook, wait for its kernel, run all cells and wait until each has run."""
    from playwright.sync_api import expect

    page.goto(f"{url}/lab/tree/{name}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=30_000)
    expect(page.locator(".jp-StatusBar-Widget", has_text=re.compile(r"\| Idle")).first).to_be_visible(timeout=30_000)
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=10_000)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(
        """() => {
            const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')];
            return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
        }""", timeout=timeout_ms)


@pytest.mark.parametrize("jupyterlab", [DEMO_PROFILE], indirect=True, ids=["demo11"])
def test_demo_11_profiles_in_jupyterlab(jupyterlab, tmp_path):
    """Demo 11 runs; its profiles show a time bar per source line and the roofline, drawn by
    the extension (``.nbxla-profile``, an SVG roofline) or by the HTML fallback (an image)."""
    from playwright.sync_api import expect, sync_playwright

    url, name, env = jupyterlab
    start = time.monotonic()
    extension = _extension_installed(env)
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            console_errors = []
            page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
            _open_and_run_all(page, url, name, timeout_ms=120_000)
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                                  has_text="Traceback")
            assert errors.count() == 0, errors.first.inner_text()

            # Per-line bars: the source lines of each profile, and bars with a width.
            profile = page.locator(".jp-OutputArea-child .nbxla-profile").first
            expect(profile).to_be_attached()
            profile.scroll_into_view_if_needed()
            lines = profile.locator(".nbxla-line")
            assert lines.count() >= 2
            assert profile.locator(".nbxla-line", has_text="np.mean(3 * x**2 + y)").count() == 1
            widths = profile.locator(".nbxla-line-bar").evaluate_all(
                "bars => bars.map(b => b.getBoundingClientRect().width)")
            assert max(widths) > 50, widths
            expect(profile.locator(".nbxla-profile-verdict")).to_contain_text("memory bound")
            # The roofline: an SVG with a point per kernel (extension) or the chart image (HTML).
            roofline = page.locator(".jp-OutputArea-child .nbxla-roofline").first
            expect(roofline).to_be_attached()
            roofline.scroll_into_view_if_needed()
            assert roofline.evaluate("r => r.getBoundingClientRect().width") > 100
            if extension:
                assert page.locator(".nbxla-profile svg.nbxla-roofline .nbxla-roofline-point").count() >= 1
            else:
                assert roofline.evaluate("img => img.naturalWidth") > 100
            page.screenshot(path=str(artifacts / "demo11-profile.png"), full_page=False)
            # The slow loop's decisions, in words.
            loop = page.locator(".nbxla-profile-decisions li", has_text="rolled into a while (trip count 20000)")
            expect(loop.first).to_be_attached()
            ours = [e for e in console_errors if "nbxla" in e]
            assert not ours, ours
        finally:
            browser.close()
    keep = os.environ.get("NBXLA_TEST_ARTIFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for shot in artifacts.glob("*.png"):
            shutil.copy(shot, Path(keep) / shot.name)
    print(f"\nbrowser test, demo 11 ({'extension' if extension else 'HTML fallback'}): screenshots in {artifacts}")
    elapsed = time.monotonic() - start
    assert elapsed < PROFILE_BUDGET_S, f"took {elapsed:.0f} s"
