# SPDX-License-Identifier: MIT
#
# `errand serve` settings: --help lists every setting with its ERRAND_*
# variable and default; ERRAND_* variables and a --config file work, with
# flags beating the environment and the environment beating the file; bad
# values, unknown flags and unknown config keys are refused with a clear
# message and a non-zero exit.

import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, free_port, run_errand  # noqa: E402

# Settings API.md and ARCHITECTURE.md name, with the defaults they promise.
DOCUMENTED = {"listen": "127.0.0.1:7400", "store": "sqlite:./errand.db", "token": None,
              "config": None}


class HelpTest(unittest.TestCase):
    def test_help_lists_every_setting_with_env_name_and_default(self):
        rc, out, err = run_errand(["serve", "--help"])
        self.assertEqual(rc, 0, err)
        text = out + err
        flags = re.findall(r"^\s*--([a-z][a-z0-9-]*)", text, re.M)
        self.assertGreaterEqual(len(flags), 8, text)
        for name in list(DOCUMENTED) + ["durability", "max-body", "payload-max",
                                         "shutdown-grace"]:
            self.assertIn(name, flags, "--%s missing from --help:\n%s" % (name, text))
        for line in text.splitlines():
            m = re.match(r"^\s*--([a-z][a-z0-9-]*)", line)
            if not m:
                continue
            env = "ERRAND_" + m.group(1).upper().replace("-", "_")
            self.assertIn(env, line, "no %s on the --%s line" % (env, m.group(1)))
            self.assertIn("default", line.lower(), "no default on the --%s line" % m.group(1))
        listen = [ln for ln in text.splitlines() if re.match(r"^\s*--listen\b", ln)][0]
        self.assertIn("127.0.0.1:7400", listen)
        self.assertIn("ERRAND_TOKENS", text)

    def test_unknown_flag_exits_nonzero_naming_it(self):
        rc, out, err = run_errand(["serve", "--no-such-flag", "1"])
        self.assertIsNotNone(rc)
        self.assertNotEqual(rc, 0)
        self.assertIn("no-such-flag", err)

    def test_bad_durability_value_exits_nonzero_naming_the_setting(self):
        with tempfile.TemporaryDirectory() as d:
            rc, out, err = run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                                       "sqlite:%s/e.db" % d, "--durability", "sometimes"])
        self.assertIsNotNone(rc, "server started with --durability sometimes")
        self.assertNotEqual(rc, 0)
        self.assertIn("durability", err)
        self.assertIn("sometimes", err)

    def test_bad_size_value_exits_nonzero(self):
        with tempfile.TemporaryDirectory() as d:
            rc, out, err = run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                                       "sqlite:%s/e.db" % d, "--max-body", "lots"])
        self.assertIsNotNone(rc)
        self.assertNotEqual(rc, 0)
        self.assertIn("max-body", err)

    def test_connection_and_head_limits_out_of_range_are_refused(self):
        # each bounded; the message names the setting
        for flag, value in (("--max-connections", "0"), ("--max-connections", "1000001"),
                            ("--head-timeout", "50ms"), ("--head-timeout", "2h"),
                            ("--head-timeout", "soon"), ("--body-min-rate", "2g"),
                            ("--body-min-rate", "-1"), ("--max-body-in-flight", "512"),
                            ("--max-body-in-flight", "2t"), ("--max-body-in-flight", "lots")):
            with tempfile.TemporaryDirectory() as d:
                rc, out, err = run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                                           "sqlite:%s/e.db" % d, flag, value])
            self.assertIsNotNone(rc, "server started with %s %s" % (flag, value))
            self.assertNotEqual(rc, 0, "%s %s" % (flag, value))
            self.assertIn(flag[2:], err, "%s %s: %s" % (flag, value, err))

    def test_max_body_in_flight_below_max_body_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            rc, out, err = run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                                       "sqlite:%s/e.db" % d, "--max-body", "2m",
                                       "--max-body-in-flight", "1m"])
        self.assertIsNotNone(rc)
        self.assertNotEqual(rc, 0)
        self.assertIn("--max-body-in-flight", err)
        self.assertIn("at least --max-body", err)

    def test_bad_durability_in_env_exits_nonzero(self):
        with tempfile.TemporaryDirectory() as d:
            rc, out, err = run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                                       "sqlite:%s/e.db" % d], env={"ERRAND_DURABILITY": "maybe"})
        self.assertIsNotNone(rc)
        self.assertNotEqual(rc, 0)
        self.assertIn("durability", err)

    def test_unopenable_store_exits_nonzero_with_message(self):
        rc, out, err = run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                                   "sqlite:/nonexistent-dir/x/e.db"])
        self.assertIsNotNone(rc)
        self.assertNotEqual(rc, 0)
        self.assertIn("store", err)


class SettingsSourcesTest(unittest.TestCase):
    def test_errand_listen_env_is_used(self):
        port = free_port()
        with Server(listen=None, env={"ERRAND_LISTEN": "127.0.0.1:%d" % port}) as s:
            self.assertEqual(s.port, port)
            self.assertEqual(s.get("/healthz")[0], 200)

    def test_listen_flag_beats_env(self):
        p_env, p_flag = free_port(), free_port()
        with Server(listen="127.0.0.1:%d" % p_flag,
                    env={"ERRAND_LISTEN": "127.0.0.1:%d" % p_env}) as s:
            self.assertEqual(s.port, p_flag)

    def test_errand_store_env_is_used(self):
        with tempfile.TemporaryDirectory() as d:
            db = os.path.join(d, "from-env.db")
            with Server(store=None, env={"ERRAND_STORE": "sqlite:" + db}) as s:
                self.assertEqual(s.enqueue("cli-q", {"name": "x", "id": "env-1"})[0], 201)
            self.assertTrue(os.path.exists(db))

    def test_durability_normal_is_accepted(self):
        with Server(args=["--durability", "normal"]) as s:
            self.assertEqual(s.enqueue("cli-q", {"name": "x"})[0], 201)

    def test_config_file_sets_listen_and_store(self):
        with tempfile.TemporaryDirectory() as d:
            port = free_port()
            db = os.path.join(d, "from-config.db")
            cfg = os.path.join(d, "errand.conf")
            with open(cfg, "w") as f:
                f.write("# comment\nlisten = 127.0.0.1:%d\nstore = sqlite:%s\n\n"
                        "payload-max = 1k\n" % (port, db))
            with Server(listen=None, store=None, args=["--config", cfg]) as s:
                self.assertEqual(s.port, port)
                st, b, _ = s.enqueue("cli-q", {"name": "x", "payload": "p" * 2048})
                self.assertEqual(st, 413, b)
                self.assertEqual(s.enqueue("cli-q", {"name": "x", "id": "cfg-1"})[0], 201)
            self.assertTrue(os.path.exists(db))

    def test_env_beats_config_file_and_flag_beats_both(self):
        with tempfile.TemporaryDirectory() as d:
            p_cfg, p_env, p_flag = free_port(), free_port(), free_port()
            cfg = os.path.join(d, "errand.conf")
            with open(cfg, "w") as f:
                f.write("listen = 127.0.0.1:%d\n" % p_cfg)
            env = {"ERRAND_LISTEN": "127.0.0.1:%d" % p_env}
            with Server(listen=None, env=env, args=["--config", cfg]) as s:
                self.assertEqual(s.port, p_env)
            with Server(listen="127.0.0.1:%d" % p_flag, env=env, args=["--config", cfg]) as s:
                self.assertEqual(s.port, p_flag)

    def test_errand_config_env_names_the_file(self):
        with tempfile.TemporaryDirectory() as d:
            port = free_port()
            cfg = os.path.join(d, "errand.conf")
            with open(cfg, "w") as f:
                f.write("listen = 127.0.0.1:%d\n" % port)
            with Server(listen=None, env={"ERRAND_CONFIG": cfg}) as s:
                self.assertEqual(s.port, port)

    def test_config_file_unknown_key_exits_nonzero_naming_it(self):
        with tempfile.TemporaryDirectory() as d:
            cfg = os.path.join(d, "errand.conf")
            with open(cfg, "w") as f:
                f.write("listen = 127.0.0.1:0\nlisten_port = 7400\n")
            rc, out, err = run_errand(["serve", "--config", cfg, "--store",
                                       "sqlite:%s/e.db" % d])
        self.assertIsNotNone(rc, "server started with an unknown config key")
        self.assertNotEqual(rc, 0)
        self.assertIn("listen_port", err)
        self.assertIn("unknown", err.lower())

    def test_config_file_line_without_equals_exits_nonzero(self):
        with tempfile.TemporaryDirectory() as d:
            cfg = os.path.join(d, "errand.conf")
            with open(cfg, "w") as f:
                f.write("listen 127.0.0.1:0\n")
            rc, out, err = run_errand(["serve", "--config", cfg, "--store",
                                       "sqlite:%s/e.db" % d])
        self.assertIsNotNone(rc)
        self.assertNotEqual(rc, 0)
        self.assertIn("errand.conf", err)

    def test_missing_config_file_exits_nonzero_naming_it(self):
        rc, out, err = run_errand(["serve", "--config", "/nonexistent/errand.conf"])
        self.assertIsNotNone(rc)
        self.assertNotEqual(rc, 0)
        self.assertIn("/nonexistent/errand.conf", err)

    def test_bad_value_in_config_file_exits_nonzero(self):
        with tempfile.TemporaryDirectory() as d:
            cfg = os.path.join(d, "errand.conf")
            with open(cfg, "w") as f:
                f.write("durability = eventually\n")
            rc, out, err = run_errand(["serve", "--config", cfg, "--listen", "127.0.0.1:0",
                                       "--store", "sqlite:%s/e.db" % d])
        self.assertIsNotNone(rc)
        self.assertNotEqual(rc, 0)
        self.assertIn("durability", err)


if __name__ == "__main__":
    unittest.main()
