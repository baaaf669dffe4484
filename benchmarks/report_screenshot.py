"""Open a ``flywheel report`` page in a headless Chromium, check that every section is shown with
its heading, that every picture loaded and that the page asked for nothing over the network, and
save a full-page screenshot.

The browser comes from the npm registry: the ``@sparticuz/chromium`` package ships a Chromium
build inside its tarball, and ``puppeteer-core`` drives it (Node.js and npm needed; nothing else is
downloaded). ``--install`` puts both into ``--browser-dir`` once (about 120 MB)::

    flywheel report data/runs/<run_id> --html report.html
    python -m benchmarks.report_screenshot report.html --out report.png --install

Prints one line per section and picture; exit 0 when every check passed, 1 otherwise, 2 when the
browser is missing (run with ``--install``) or the page does not exist. Not part of ``make test``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from flywheel.face.report_page import SECTIONS

PACKAGES = ("@sparticuz/chromium@147", "puppeteer-core@24")
DEFAULT_DIR = Path.home() / ".cache" / "flywheel" / "headless-chromium"

# Runs in --browser-dir (so that the packages resolve); argv: page URL, screenshot path, width,
# sections as JSON. Prints one JSON object.
DRIVER = r"""
import chromium from "@sparticuz/chromium";
import puppeteer from "puppeteer-core";
const [url, out, width, sections] = process.argv.slice(1);
const browser = await puppeteer.launch({args: chromium.args, executablePath: await chromium.executablePath(),
                                        headless: "shell"});
try {
  const page = await browser.newPage();
  const fetched = [];
  page.on("request", r => { if (!/^(data|file|about):/.test(r.url())) fetched.push(r.url()); });
  await page.setViewport({width: Number(width), height: 900});
  await page.goto(url, {waitUntil: "load"});
  const found = await page.evaluate((sections) => {
    const shown = el => { const s = getComputedStyle(el), b = el.getBoundingClientRect();
                          return s.display !== "none" && s.visibility !== "hidden" && b.width > 0 && b.height > 0; };
    const out = {sections: {}, images: []};
    for (const [id, heading] of Object.entries(sections)) {
      const el = document.getElementById(id), h = el && el.querySelector("h2");
      out.sections[id] = {present: !!el, shown: !!el && shown(el), heading: h ? h.textContent : null,
                          heading_ok: !!h && h.textContent === heading && shown(h),
                          height: el ? Math.round(el.getBoundingClientRect().height) : 0};
    }
    for (const img of document.images)
      out.images.push({section: img.closest("section")?.id ?? "(none)", alt: img.alt, complete: img.complete,
                       width: img.naturalWidth, height: img.naturalHeight, shown: shown(img)});
    out.page_height = document.documentElement.scrollHeight;
    return out;
  }, JSON.parse(sections));
  await page.screenshot({path: out, fullPage: true});
  console.log(JSON.stringify({...found, fetched}));
} finally {
  await browser.close();
}
"""


def install(browser_dir: Path) -> None:
    """``npm install`` the browser and its driver into ``browser_dir`` (the npm registry only)."""
    if shutil.which("npm") is None:
        sys.exit("error: npm not found: install Node.js (18 or later) with npm")
    browser_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(browser_dir), *PACKAGES], check=True)


def render(page: Path, out: Path, browser_dir: Path, width: int, timeout_s: float) -> dict:
    """Open ``page`` headless, check it, save the screenshot to ``out``: the driver's findings."""
    proc = subprocess.run(["node", "--input-type=module", "-e", DRIVER, page.resolve().as_uri(), str(out.resolve()),
                           str(width), json.dumps(SECTIONS)],
                          cwd=browser_dir, capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"the headless browser failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def problems(found: dict) -> list[str]:
    """What is wrong with the page as the browser showed it (empty: nothing)."""
    bad = [f"section {sid}: " + ("missing" if not s["present"] else "not shown" if not s["shown"]
                                 else f"heading {s['heading']!r}")
           for sid, s in found["sections"].items() if not (s["present"] and s["shown"] and s["heading_ok"])]
    bad += [f"picture {i['alt']!r} in {i['section']}: not loaded or not shown"
            for i in found["images"] if not (i["complete"] and i["width"] > 0 and i["shown"])]
    bad += [f"fetched {url}" for url in found["fetched"]]
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("page", type=Path, help="The report page (flywheel report RUN_DIR --html FILE).")
    ap.add_argument("--out", type=Path, default=Path("report.png"), help="Where to save the screenshot (PNG).")
    ap.add_argument("--browser-dir", type=Path, default=DEFAULT_DIR, help="Where the npm packages are installed.")
    ap.add_argument("--install", action="store_true", help="npm install the browser into --browser-dir if missing.")
    ap.add_argument("--width", type=int, default=1280, help="Viewport width in pixels.")
    ap.add_argument("--timeout", type=float, default=180, help="Seconds to wait for the browser.")
    args = ap.parse_args()
    if not args.page.is_file():
        print(f"error: {args.page}: no such file", file=sys.stderr)
        sys.exit(2)
    if not (args.browser_dir / "node_modules" / "@sparticuz" / "chromium").is_dir():
        if not args.install:
            print(f"error: no browser in {args.browser_dir}; add --install (npm install {' '.join(PACKAGES)})",
                  file=sys.stderr)
            sys.exit(2)
        install(args.browser_dir)
    found = render(args.page, args.out, args.browser_dir, args.width, args.timeout)
    for sid, s in found["sections"].items():
        print(f"section {sid:<12} shown={s['shown']} heading={s['heading']!r} height={s['height']}px")
    for i in found["images"]:
        print(f"picture in {i['section']:<12} {i['width']}x{i['height']} loaded={i['complete']} ({i['alt']})")
    print(f"network requests: {len(found['fetched'])}; page height {found['page_height']}px; screenshot: {args.out}")
    bad = problems(found)
    for b in bad:
        print(f"problem: {b}", file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
