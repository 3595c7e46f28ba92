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
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "shop"))
from harness import PG_SKIP, PG_SKIP_WHY, REPO_ROOT, psql_bin  # noqa: E402
from test_shop import ShopCase, build_dir  # noqa: E402

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
class GuideTest(ShopCase):
    PREFIX = "guide"

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
