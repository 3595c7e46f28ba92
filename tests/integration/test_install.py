#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# `cmake --install` of the build tree (ERRAND_BUILD_DIR, else the directory
# of ERRAND_BIN) into a DESTDIR puts every file where it belongs: errand,
# liberrand and liberrand-pg, the headers, the pkg-config files (which find
# their prefix from where they are), the man pages, the systemd units (naming
# the installed binary and config), the config and its example; the installed
# errand runs. CPack builds the Debian package from the same install: its
# control fields (dependencies from the linked libraries, adduser for the
# maintainer scripts that create the errand user and /var/lib/errand), its
# conffile and its file list, read with dpkg-deb -I/-c. Nothing is installed
# on this machine.

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import errand_bin  # noqa: E402


def build_dir():
    return os.environ.get("ERRAND_BUILD_DIR") or os.path.dirname(os.path.abspath(errand_bin()))


def cache(name):
    with open(os.path.join(build_dir(), "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split("=", 1)[1].strip()
    raise AssertionError("%s is not in the CMake cache" % name)


def wanted(prefix, libdir, sysconfdir):
    p = prefix.lstrip("/")
    lib = libdir if libdir.startswith("/") else p + "/" + libdir
    lib = lib.lstrip("/")
    etc = sysconfdir.lstrip("/") if sysconfdir.startswith("/") else p + "/" + sysconfdir
    files = ["bin/errand", "include/errand/errand.h", "include/errand/errand_pg.h",
             "share/man/man1/errand.1", "share/man/man1/errand-serve.1",
             "share/man/man1/errand-work.1", "share/man/man7/errand-api.7",
             "lib/systemd/system/errand.service", "lib/systemd/system/errand-worker@.service",
             "share/doc/errand/errand.conf.example", "share/doc/errand/operations.md",
             "share/doc/errand/api.md", "share/doc/errand/openapi.yaml"]
    out = [p + "/" + f for f in files]
    out += [lib + "/" + f for f in ("liberrand.a", "liberrand.so", "liberrand.so.0",
                                    "liberrand-pg.a", "liberrand-pg.so", "liberrand-pg.so.0",
                                    "pkgconfig/errand.pc", "pkgconfig/errand-pg.pc")]
    out.append(etc + "/errand/errand.conf")
    return out, etc


@unittest.skipUnless(shutil.which("cmake"), "cmake is not installed")
class Install(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="errand-install-")
        cls.dest = os.path.join(cls.tmp, "root")
        p = subprocess.run(["cmake", "--install", build_dir()], capture_output=True, text=True,
                           env=dict(os.environ, DESTDIR=cls.dest), timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        cls.prefix = cache("CMAKE_INSTALL_PREFIX")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def path(self, rel):
        return os.path.join(self.dest, rel)

    def test_every_file_is_installed(self):
        files, _ = wanted(self.prefix, cache("CMAKE_INSTALL_LIBDIR"),
                          cache("CMAKE_INSTALL_SYSCONFDIR"))
        for f in files:
            self.assertTrue(os.path.lexists(self.path(f)), f)
        self.assertTrue(os.access(self.path(self.prefix.lstrip("/") + "/bin/errand"), os.X_OK))

    def test_the_installed_errand_runs_and_the_units_name_it(self):
        bin_ = self.path(self.prefix.lstrip("/") + "/bin/errand")
        p = subprocess.run([bin_, "--version"], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"^errand \d+\.\d+\.\d+ \(commit ")
        unit = self.path(self.prefix.lstrip("/") + "/lib/systemd/system/errand.service")
        with open(unit) as f:
            text = f.read()
        _, etc = wanted(self.prefix, "lib", cache("CMAKE_INSTALL_SYSCONFDIR"))
        self.assertIn("ExecStart=%s/bin/errand serve --config /%s/errand/errand.conf\n"
                      % (self.prefix.rstrip("/"), etc), text)
        conf = self.path(etc + "/errand/errand.conf")
        p = subprocess.run([bin_, "serve", "--config", conf, "--help"], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual((p.returncode, p.stderr), (0, ""))

    @unittest.skipUnless(shutil.which("pkg-config"), "pkg-config is not installed")
    def test_pkg_config_files_point_into_the_install(self):
        libdir = cache("CMAKE_INSTALL_LIBDIR")
        pc = self.path(self.prefix.lstrip("/") + "/" + libdir + "/pkgconfig")
        env = dict(os.environ, PKG_CONFIG_PATH=pc)
        for name, lib in (("errand", "-lerrand"), ("errand-pg", "-lerrand-pg")):
            p = subprocess.run(["pkg-config", "--cflags", "--libs", name], env=env,
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(lib, p.stdout.split())
            inc = re.search(r"-I(\S+)", p.stdout)
            self.assertTrue(inc, p.stdout)
            self.assertTrue(os.path.exists(os.path.join(inc.group(1), "errand", "errand.h")))

    def test_an_edited_config_is_kept_by_a_second_install(self):
        _, etc = wanted(self.prefix, "lib", cache("CMAKE_INSTALL_SYSCONFDIR"))
        conf = self.path(etc + "/errand/errand.conf")
        with open(conf, "a") as f:
            f.write("listen = 127.0.0.1:7499\n")
        p = subprocess.run(["cmake", "--install", build_dir()], capture_output=True, text=True,
                           env=dict(os.environ, DESTDIR=self.dest), timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(conf) as f:
            self.assertTrue(f.read().endswith("listen = 127.0.0.1:7499\n"))


@unittest.skipUnless(shutil.which("cpack") and shutil.which("dpkg-deb") and
                     shutil.which("dpkg-shlibdeps") and shutil.which("file"),
                     "needs cpack, dpkg-deb, dpkg-shlibdeps and file")
class DebianPackage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="errand-deb-")
        p = subprocess.run(["cpack", "--config", os.path.join(build_dir(), "CPackConfig.cmake"),
                            "-B", cls.tmp], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        debs = [f for f in os.listdir(cls.tmp) if f.endswith(".deb")]
        assert len(debs) == 1, debs
        cls.deb = os.path.join(cls.tmp, debs[0])
        cls.prefix = cache("CMAKE_INSTALL_PREFIX")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def dpkg_deb(self, *args):
        p = subprocess.run(["dpkg-deb"] + list(args), capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def test_control_fields_and_dependencies_from_the_linked_libraries(self):
        info = self.dpkg_deb("-I", self.deb)
        self.assertRegex(info, r"(?m)^ Package: errand$")
        depends = re.search(r"(?m)^ Depends: (.*)$", info).group(1)
        names = {d.strip().split(" ")[0] for d in depends.split(",")}
        for lib in ("adduser", "libc6", "libsqlite3-0", "libjansson4", "libcurl4", "libpq5",
                    "libssl3", "libevent-2.1-7", "libevent-pthreads-2.1-7"):
            self.assertIn(lib, names, depends)
        for script in ("postinst", "prerm", "postrm", "conffiles"):
            self.assertRegex(info, r"(?m)^\s+\d+ bytes,\s+\d+ lines\s+\*?\s+%s\b" % script)

    def test_the_maintainer_scripts_create_the_user_and_state_dir(self):
        out = os.path.join(self.tmp, "control")
        self.dpkg_deb("-e", self.deb, out)
        with open(os.path.join(out, "postinst")) as f:
            post = f.read()
        self.assertIn("adduser --system --group --home /var/lib/errand", post)
        self.assertIn("install -d -o errand -g errand -m 0750 /var/lib/errand", post)
        with open(os.path.join(out, "conffiles")) as f:
            _, etc = wanted(self.prefix, "lib", cache("CMAKE_INSTALL_SYSCONFDIR"))
            self.assertEqual(f.read(), "/%s/errand/errand.conf\n" % etc)
        for script in ("postinst", "prerm", "postrm"):
            mode = os.stat(os.path.join(out, script)).st_mode & 0o777
            self.assertEqual(mode, 0o755, script)
            p = subprocess.run(["sh", "-n", os.path.join(out, script)], capture_output=True)
            self.assertEqual(p.returncode, 0, script)

    def test_the_file_list_is_the_install(self):
        listing = self.dpkg_deb("-c", self.deb)
        paths = {line.split()[5].lstrip(".") for line in listing.splitlines()}
        files, _ = wanted(self.prefix, cache("CMAKE_INSTALL_LIBDIR"),
                          cache("CMAKE_INSTALL_SYSCONFDIR"))
        for f in files:
            self.assertIn("/" + f, paths)
        self.assertFalse([p for p in paths if "/tests/" in p or p.endswith(".o")])


if __name__ == "__main__":
    unittest.main(verbosity=2)
