"""Render an ``attncheck grade`` report in a real headless browser (Chromium), as a person would see it.

    .venv/bin/python bench/render_grade_report.py OUT/report.html [--png shot.png] [--sort score]

Prints the rendered DOM's table order and writes a screenshot when asked. Needs a Chromium
(`apt-get install -y chromium` on Debian); the test suite uses the same functions and is
skipped cleanly without one.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--virtual-time-budget=2000")


def browser() -> str | None:
    """The first Chromium-like browser on PATH, or None."""
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def _url(page: Path, sort: str | None) -> str:
    return page.resolve().as_uri() + (f"#sort={sort}" if sort else "")


def dump_dom(page: Path, sort: str | None = None, timeout: float = 60) -> str:
    """The DOM after the page's scripts ran."""
    binary = browser()
    if binary is None:
        raise RuntimeError("no Chromium found (apt-get install -y chromium)")
    done = subprocess.run([binary, *FLAGS, "--dump-dom", _url(page, sort)], capture_output=True, text=True,
                          timeout=timeout, check=True)
    return done.stdout


def screenshot(page: Path, png: Path, timeout: float = 60) -> None:
    binary = browser()
    if binary is None:
        raise RuntimeError("no Chromium found (apt-get install -y chromium)")
    subprocess.run([binary, *FLAGS, f"--screenshot={png}", "--window-size=1200,2400", _url(page, None)],
                   capture_output=True, timeout=timeout, check=True)


def students_in_order(dom: str) -> list[str]:
    """The students of the grades table, top to bottom."""
    table = dom.split('<table class="grades"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<tr><td><a href="#[^"]*">([^<]*)</a>', table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path)
    parser.add_argument("--png", type=Path)
    parser.add_argument("--sort")
    args = parser.parse_args()
    print(" ".join(students_in_order(dump_dom(args.page, args.sort))))
    if args.png:
        screenshot(args.page, args.png)
        print(f"screenshot: {args.png}")


if __name__ == "__main__":
    main()
