#!/usr/bin/env python3
"""Checks a `kjit report --html` page: it parses as HTML, every <svg> in it parses as XML (the plots
render), it loads nothing from the network and runs no scripts. Prints "N svg plots" and exits 0, or the
first problem and exits 1. With --browser, also renders it in a headless Chromium (Debian's `chromium`)
and fails on any console error; without Chromium that part is skipped, and says so.

    python3 scripts/check_report_html.py PAGE.html [--browser]
"""
import argparse
import html.parser
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []
        self.problems = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "script":
            self.problems.append("the page has a <script>")
        for name, value in attrs:
            if name in ("src", "href") and value and re.match(r"(https?:)?//", value):
                self.problems.append(f"<{tag} {name}={value}> loads from the network")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("page")
    parser.add_argument("--browser", action="store_true", help="also render it in a headless Chromium")
    args = parser.parse_args()
    text = open(args.page, encoding="utf-8").read()
    page = Page()
    page.feed(text)
    if page.problems:
        print(page.problems[0])
        return 1
    svgs = re.findall(r"<svg\b.*?</svg>", text, flags=re.S)
    for i, svg in enumerate(svgs):
        try:
            ET.fromstring(svg)
        except ET.ParseError as e:
            print(f"svg plot {i + 1} does not parse: {e}")
            return 1
    print(f"{len(svgs)} svg plots")
    if args.browser:
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if chromium is None:
            print("browser check SKIPPED: no chromium installed (Debian: apt-get install chromium)")
            return 0
        r = subprocess.run([chromium, "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr",
                            "--dump-dom", "file://" + __import__("os").path.abspath(args.page)],
                           capture_output=True, text=True, timeout=120)
        errors = [line for line in r.stderr.splitlines() if "CONSOLE" in line and "error" in line.lower()]
        if r.returncode != 0 or errors or "<svg" not in r.stdout:
            print(f"chromium: rc={r.returncode}; {errors[:3]}")
            return 1
        print("chromium rendered it without console errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
