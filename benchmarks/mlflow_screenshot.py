"""Screenshots of a tracked run in MLflow's own UI (``mlflow ui``), taken in a headless Chromium:
the run's ``Model metrics`` tab, its charts filtered by a search (``elo/``, ``eval/student/accuracy``).

Needs Debian's Chromium (``apt-get install chromium``) and Playwright's Python package, in any
environment (``python3 -m venv /tmp/pw && /tmp/pw/bin/pip install playwright``); neither is a
dependency of the project. How docs/img/mlflow-*.png were made::

    flywheel run --set tracking.kind=mlflow --set run.root=/tmp/trackrun --set run.name=tracked
    mlflow ui --backend-store-uri sqlite:////tmp/trackrun/mlflow.db --port 5055 --workers 1 &
    /tmp/pw/bin/python benchmarks/mlflow_screenshot.py RUN_ID docs/img/mlflow-elo.png "elo/"
    /tmp/pw/bin/python benchmarks/mlflow_screenshot.py RUN_ID docs/img/mlflow-accuracy.png "eval/student/accuracy"

(RUN_ID: ``run_id`` in <run>/tracking.json.)
"""

from __future__ import annotations

import argparse

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_id")
    ap.add_argument("out")
    ap.add_argument("search", help="What the metric charts are filtered by.")
    ap.add_argument("--url", default="http://127.0.0.1:5055")
    ap.add_argument("--experiment", default="1", help="The experiment's id in the store.")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=FLAGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1050})
        page.goto(f"{args.url}/#/experiments/{args.experiment}/runs/{args.run_id}/model-metrics")
        page.wait_for_timeout(4000)
        page.get_by_placeholder("Search metric charts").fill(args.search)
        page.wait_for_timeout(8000)  # the charts draw
        page.screenshot(path=args.out)
        browser.close()


if __name__ == "__main__":
    main()
