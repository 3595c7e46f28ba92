#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# The man pages and the example config are written from the tables that
# print --help (`errand help --write-docs`), so they cannot drift: every flag
# of `errand serve --help`, `errand work --help` and `errand migrate --help`
# is in its page, every serve setting in the example config (with its
# default), the committed deploy/errand.conf.example is the generated one and
# loads, every route of the API is in errand-api(7), and the pages render
# with `man -l` without warnings.

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import REPO_ROOT, errand_bin, run_errand  # noqa: E402

FLAG = re.compile(r"^  (--(?:\[no-\])?[a-z][a-z0-9-]*)\s+(ERRAND_[A-Z0-9_]+|\(flag only\))?")


def help_settings(*cmd):
    """[(flag, env or None, default)] from `errand CMD --help`."""
    rc, out, err = run_errand(list(cmd) + ["--help"])
    assert rc == 0, err
    got = []
    for line in out.splitlines():
        m = FLAG.match(line)
        if m:
            env = m.group(2) if m.group(2) and m.group(2).startswith("ERRAND_") else None
            default = re.search(r"\[default: ([^\]]*)\]$", line).group(1)
            got.append((m.group(1), env, default))
    assert got, out
    return got


def rendered(path):
    p = subprocess.run(["man", "--warnings", "-l", path], capture_output=True, text=True,
                       env=dict(os.environ, MANWIDTH="200", MAN_KEEP_FORMATTING="0"),
                       timeout=60)
    return p.returncode, re.sub(".\b", "", p.stdout), p.stderr


class Docs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="errand-docs-")
        rc, out, err = run_errand(["help", "--write-docs", cls.tmp])
        assert rc == 0, err

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def page(self, name):
        with open(os.path.join(self.tmp, name)) as f:
            return f.read()

    @unittest.skipUnless(shutil.which("man"), "man is not installed")
    def test_pages_render_without_warnings_and_list_every_flag(self):
        for page, cmd in (("errand-serve.1", ["serve"]), ("errand-work.1", ["work"]),
                          ("errand.1", ["migrate"])):
            rc, text, err = rendered(os.path.join(self.tmp, page))
            self.assertEqual((rc, err), (0, ""), page)
            for flag, env, default in help_settings(*cmd):
                self.assertRegex(text, r"(?m)^\s+" + re.escape(flag) + r"(\s|$)", (page, flag))
                flat = " ".join(text.split())
                if env:
                    self.assertIn("Environment: " + env, flat, (page, flag))
                self.assertIn("Default: " + default + ".", flat, (page, flag))
        rc, text, err = rendered(os.path.join(self.tmp, "errand-api.7"))
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("docs/api.md", text)
        self.assertIn("docs/openapi.yaml", text)

    def test_errand_1_lists_every_command_of_errand_help(self):
        rc, out, _ = run_errand(["--help"])
        names = [m.group(1) for m in re.finditer(r"(?m)^  ([a-z]+(?: [a-z]+)?)\s{2,}", out)]
        self.assertIn("migrate", names)
        page = self.page("errand.1")
        for n in names:
            self.assertIn(".B errand " + n.replace("-", "\\-") + "\n", page, n)

    def test_the_api_page_has_every_route_of_openapi(self):
        import json  # noqa: F401  (stdlib only: the paths are read with a regex)
        with open(os.path.join(REPO_ROOT, "docs", "openapi.yaml")) as f:
            paths = re.findall(r"(?m)^  (/[^:]*):\s*$", f.read())
        self.assertTrue(paths)
        page = self.page("errand-api.7").replace("\\-", "-")
        for p in paths:
            self.assertIn(" " + p + "\n", page, p)

    def test_the_example_config_lists_every_serve_setting_at_its_default(self):
        text = self.page("errand.conf.example")
        for flag, env, default in help_settings("serve"):
            name = flag.replace("--[no-]", "").lstrip("-")
            if name == "config":
                self.assertNotIn("#config", text)
                continue
            want = "#%s = %s\n" % (name, default) if default != "none" else "#%s =\n" % name
            self.assertIn(want, text, name)

    def test_the_committed_example_is_the_generated_one_and_loads(self):
        committed = os.path.join(REPO_ROOT, "deploy", "errand.conf.example")
        with open(committed) as f:
            self.assertEqual(f.read(), self.page("errand.conf.example"),
                             "regenerate: errand help --config-example > "
                             "deploy/errand.conf.example")
        rc, out, err = run_errand(["serve", "--config", committed, "--help"])
        self.assertEqual((rc, err), (0, ""))
        # every line uncommented that has a value still loads
        conf = os.path.join(self.tmp, "all.conf")
        with open(committed) as f, open(conf, "w") as g:
            for line in f:
                if re.match(r"^#[a-z][a-z0-9-]* = \S", line):
                    g.write(line[1:])
        rc, out, err = run_errand(["serve", "--config", conf, "--help"])
        self.assertEqual((rc, err), (0, ""))

    def test_bad_doc_requests_exit_2(self):
        for args in (["help", "--man", "nope"], ["help", "--man"], ["help", "--frob"],
                     ["help", "--write-docs"], ["help", "--config-example", "x"]):
            rc, out, err = run_errand(args)
            self.assertEqual(rc, 2, args)
            self.assertTrue(err, args)
        rc, out, err = run_errand(["help", "--write-docs", os.path.join(self.tmp, "no", "dir")])
        self.assertEqual(rc, 1, err)
        for name in ("serve", "errand-serve", "work", "api", "errand"):
            rc, out, err = run_errand(["help", "--man", name])
            self.assertEqual(rc, 0, name)
            self.assertTrue(out.startswith(".\\\" generated"), name)


if __name__ == "__main__":
    unittest.main(verbosity=2)
