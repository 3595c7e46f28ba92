# SPDX-License-Identifier: MIT
#
# Runs every snippet of docs/guide.md, in order, against the shop example
# (examples/shop) on a fresh PostgreSQL database: ```sh blocks with bash
# (set -euo pipefail; S, GATEWAY and DB set, errand and shop_worker on PATH),
# ```sql blocks with psql (ON_ERROR_STOP), ```c blocks compiled against
# liberrand-pg with the project's warnings and run with the database's URL.
# A block of any other kind fails the test: the guide promises that every
# snippet runs. Needs ERRAND_TEST_PG_URL.

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "shop"))
from harness import PG_SKIP, PG_SKIP_WHY, PG_URL, REPO_ROOT, psql, psql_bin  # noqa: E402
from harness import run_errand, with_params  # noqa: E402
import shoplib  # noqa: E402
from test_outbox import app_url  # noqa: E402
from test_shop import build_dir, fast_queues  # noqa: E402

GUIDE = os.path.join(REPO_ROOT, "docs", "guide.md")
FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```$", re.M | re.S)


def snippets():
    with open(GUIDE) as f:
        text = f.read()
    return [(text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2))
            for m in FENCE.finditer(text)]


def build_cache():
    """The build directory's CMakeCache.txt entries (NAME -> value)."""
    got = {}
    try:
        with open(os.path.join(build_dir(), "CMakeCache.txt")) as f:
            for line in f:
                m = re.match(r"^([A-Za-z_]+):[A-Z]+=(.*)$", line.rstrip("\n"))
                if m:
                    got[m.group(1)] = m.group(2)
    except OSError:
        pass
    return got


@unittest.skipIf(PG_SKIP, PG_SKIP_WHY)
class GuideTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not PG_URL:
            raise RuntimeError("ERRAND_TEST_PG_URL is not set (ERRAND_TEST_PG_SKIP=1 skips)")
        cls.dbname = "guide_%d_%d" % (os.getpid(), int(time.time() * 1000) % 10**7)
        psql("CREATE DATABASE %s" % cls.dbname)
        cls.db_url = app_url(cls.dbname)
        rc, out, err = run_errand(["outbox", "install", "--db", cls.db_url, "--notify"],
                                  timeout=60)
        assert rc == 0, (rc, out, err)
        cls.workdir = tempfile.mkdtemp(prefix="errand-guide-")
        cls.shop = shoplib.Shop(cls.workdir, shoplib.bins_from(build_dir()), cls.db_url,
                                with_params(cls.db_url, schema="errand", pool_size=8),
                                queues=fast_queues(), numbers=(2000, 3000, 5000))
        try:
            cls.shop.start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "shop", None):
            cls.shop.stop_all()
        psql("DROP DATABASE IF EXISTS %s WITH (FORCE)" % cls.dbname)
        if not os.environ.get("ERRAND_KEEP_TMP"):
            shutil.rmtree(cls.workdir, ignore_errors=True)

    def run_sh(self, code, env):
        return subprocess.run(["bash", "-c", "set -euo pipefail\n" + code], cwd=self.workdir,
                              env=env, capture_output=True, text=True, timeout=120)

    def run_sql(self, code, env):
        return subprocess.run([psql_bin(), self.db_url, "-X", "-q", "-v", "ON_ERROR_STOP=1",
                               "-f", "-"], input=code, env=env, capture_output=True, text=True,
                              timeout=120)

    def run_c(self, code, env, n):
        src = os.path.join(self.workdir, "snippet%d.c" % n)
        exe = src[:-2]
        with open(src, "w") as f:
            f.write(code)
        cache = build_cache()
        cc = cache.get("CMAKE_C_COMPILER") or "cc"
        # The library was built with the build's sanitizer: so is the program.
        san = (["-fsanitize=address,undefined"] if cache.get("ERRAND_SANITIZE") == "ON" else
               ["-fsanitize=thread"] if cache.get("ERRAND_TSAN") == "ON" else [])
        lib = os.path.dirname(os.path.join(build_dir(), "x"))
        out = subprocess.run([cc] + san + ["-std=c17", "-Wall", "-Wextra", "-Werror", "-Wshadow",
                              "-I", os.path.join(REPO_ROOT, "include"),
                              "-I", "/usr/include/postgresql", src, "-o", exe,
                              "-L", lib, "-Wl,-rpath," + lib, "-lerrand-pg", "-lpq"],
                             env=env, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            return out
        return subprocess.run([exe, self.db_url], env=env, capture_output=True, text=True,
                              timeout=120)

    def test_every_snippet_runs(self):
        blocks = snippets()
        self.assertGreaterEqual(len(blocks), 12)
        shop = self.shop
        path = [os.path.dirname(shop.bins["errand"]), os.path.dirname(shop.bins["worker"])]
        env = shop.env({"S": shop.url["errand"], "GATEWAY": shop.url["gateway"],
                        "DB": self.db_url})
        env["PATH"] = os.pathsep.join(path + [env.get("PATH", "")])
        ran = {}
        for n, (line, lang, code) in enumerate(blocks):
            if lang == "sh":
                out = self.run_sh(code, env)
            elif lang == "sql":
                out = self.run_sql(code, env)
            elif lang == "c":
                out = self.run_c(code, env, n)
            else:
                self.fail("docs/guide.md:%d: a ```%s block, which no test runs" % (line, lang))
            self.assertEqual(out.returncode, 0, "docs/guide.md:%d (```%s) failed:\n%s%s"
                             % (line, lang, out.stdout, out.stderr))
            ran[lang] = ran.get(lang, 0) + 1
        self.assertEqual(sorted(ran), ["c", "sh", "sql"], ran)


if __name__ == "__main__":
    unittest.main()
