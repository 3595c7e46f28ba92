#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# `errand --version` and `errand version` print the release and the source
# commit the binary was built from; cmake/commit.cmake, which finds that
# commit at build time, says "unknown" outside a git checkout.

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import REPO_ROOT, run_errand  # noqa: E402

LINE = re.compile(r"^errand (\d+\.\d+\.\d+) \(commit ([0-9a-f]{12}(-dirty)?|unknown)\)$")


def project_version():
    with open(os.path.join(REPO_ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(errand VERSION (\S+)", f.read()).group(1)


class Version(unittest.TestCase):
    def test_both_spellings_print_the_release_and_the_commit(self):
        for arg in ("--version", "version"):
            rc, out, err = run_errand([arg])
            self.assertEqual((rc, err), (0, ""))
            m = LINE.match(out.strip())
            self.assertTrue(m, out)
            self.assertEqual(m.group(1), project_version())

    @unittest.skipUnless(shutil.which("git") and shutil.which("cmake"), "needs git and cmake")
    def test_the_script_reads_the_checkout_and_says_unknown_outside_one(self):
        tmp = tempfile.mkdtemp(prefix="errand-commit-")
        try:
            out = os.path.join(tmp, "c.h")

            def run(src, *extra):
                subprocess.run(["cmake", "-DSRC=" + src, "-DOUT=" + out] + list(extra) +
                               ["-P", os.path.join(REPO_ROOT, "cmake", "commit.cmake")],
                               check=True, capture_output=True, timeout=30)
                with open(out) as f:
                    return re.search(r'#define ER_COMMIT "([^"]*)"', f.read()).group(1)
            head = subprocess.run(["git", "-C", REPO_ROOT, "rev-parse", "--short=12", "HEAD"],
                                  capture_output=True, text=True)
            if head.returncode == 0:
                self.assertTrue(run(REPO_ROOT).startswith(head.stdout.strip()))
            self.assertEqual(run(tmp), "unknown")
            self.assertEqual(run(tmp, "-DCOMMIT=1a2b3c"), "1a2b3c")
            # what is not a commit's spelling is dropped, not printed
            self.assertEqual(run(tmp, "-DCOMMIT=ab\"; rm"), "abrm")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
