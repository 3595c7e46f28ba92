#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# The dashboard in headless Chromium (tests/browser/dashboard.test.js,
# playwright-core driving Debian's /usr/bin/chromium) against a real server
# with tokens: login, live counts, pause, job detail, a hostile payload
# shown as text, dead-letter redrive with confirmation, schedulers in their
# zones, leases and cursors, the audit page, refused forged POSTs and pages
# without a session, and a viewer's session that sees no payload.
# It fails (never skips) when chromium, node or the npm package is missing;
# the package is installed with `npm ci` when tests/browser/node_modules is
# absent. ERRAND_SCREENSHOTS=DIR saves PNGs of the main pages
# (scripts/screenshots writes docs/img/).

import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import REPO_ROOT, Server  # noqa: E402

BROWSER_DIR = os.path.join(REPO_ROOT, "tests", "browser")
ADMIN = "dashboard-admin-token-0123456789"
VIEWER = "dashboard-viewer-token-0123456789"
CHROMIUM = "/usr/bin/chromium"


def ensure_node_modules():
    """npm ci when playwright-core is not installed; raises when it cannot be."""
    if os.path.isdir(os.path.join(BROWSER_DIR, "node_modules", "playwright-core")):
        return
    npm = shutil.which("npm")
    if not npm:
        raise AssertionError("npm is missing: install Debian's nodejs and npm (scripts/deps)")
    r = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=BROWSER_DIR,
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError("npm ci failed in tests/browser:\n" + r.stdout + r.stderr)


class Dashboard(unittest.TestCase):
    def test_the_dashboard_in_a_browser(self):
        node = shutil.which("node")
        self.assertTrue(node, "node is missing: install Debian's nodejs (scripts/deps)")
        self.assertTrue(os.access(CHROMIUM, os.X_OK),
                        CHROMIUM + " is missing: install Debian's chromium (scripts/deps)")
        ensure_node_modules()
        with Server(args=["--token", "admin@ops:" + ADMIN, "--token", "viewer@watch:" + VIEWER],
                    token=ADMIN) as s:
            env = dict(os.environ, ERRAND_URL="http://127.0.0.1:%d" % s.port,
                       ERRAND_ADMIN_TOKEN=ADMIN, ERRAND_VIEWER_TOKEN=VIEWER,
                       ERRAND_CHROMIUM=CHROMIUM)
            r = subprocess.run([node, os.path.join(BROWSER_DIR, "dashboard.test.js")],
                               cwd=BROWSER_DIR, env=env, capture_output=True, text=True,
                               timeout=300)
            self.assertEqual(r.returncode, 0, "browser test failed:\n" + r.stdout + r.stderr
                             + "\nserver log:\n" + s.log_text(30))


if __name__ == "__main__":
    unittest.main()
