# SPDX-License-Identifier: MIT
#
# TLS on the Faktory port (docs/faktory.md, "TLS"): with --faktory-tls-cert
# and --faktory-tls-key (a throwaway self-signed certificate the test makes
# with the openssl command) the port speaks TLS: Python's ssl client and
# `openssl s_client` verify the certificate and speak the protocol over it,
# the npm client faktory-worker connects with a tcp+tls:// URL and its
# tlsOptions (the CA, or rejectUnauthorized false; without either it refuses
# the self-signed certificate), and a plaintext client is closed without a
# reply while the port keeps serving. Start-up refuses one flag without the
# other, the flags without --faktory-listen, a missing file, a file that is
# not PEM and a key that is not the certificate's, each with a clear error.

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, run_errand  # noqa: E402
from test_faktory import Faktory  # noqa: E402
from test_faktory_node import require_node, run_node, token_args, PASSWORDS  # noqa: E402


def openssl(*args, cwd):
    r = subprocess.run(["openssl"] + list(args), cwd=cwd, capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        raise AssertionError("openssl %s: %s" % (" ".join(args), r.stderr))


def make_cert(d, name="server"):
    """A self-signed P-256 certificate for localhost and 127.0.0.1: (cert, key)."""
    cert, key = os.path.join(d, name + ".pem"), os.path.join(d, name + ".key")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", cwd=d)
    return cert, key


def fk_port(s, after=0):
    rec = s.wait_log("faktory listening", after=after)
    return rec, int(rec["listen"].rpartition(":")[2])


class TlsLine(Faktory):
    """A raw protocol connection over TLS, the certificate verified."""

    def __init__(self, port, cafile):  # noqa: super().__init__ would dial in plaintext
        ctx = ssl.create_default_context(cafile=cafile)
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock = ctx.wrap_socket(raw, server_hostname="localhost")
        self.f = self.sock.makefile("rwb")
        self.greeting = self.reply()


class TlsServer:
    """Mixin: a server with a Faktory port over TLS on a fresh self-signed
    certificate (cls.cert, cls.key), for the class; SERVER_ARGS more flags."""

    SERVER_ARGS = ()
    TOKEN = None

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="errand-tls-")
        cls.cert, cls.key = make_cert(cls.dir)
        cls.s = Server(args=["--faktory-listen", "127.0.0.1:0", "--faktory-tls-cert", cls.cert,
                             "--faktory-tls-key", cls.key] + list(cls.SERVER_ARGS),
                       token=cls.TOKEN).start()
        cls.rec, cls.port = fk_port(cls.s)

    @classmethod
    def tearDownClass(cls):
        cls.s.term()
        cls.s.cleanup()
        shutil.rmtree(cls.dir, ignore_errors=True)


@unittest.skipUnless(shutil.which("openssl"), "the openssl command is missing")
class FaktoryTls(TlsServer, unittest.TestCase):
    def test_the_listener_logs_tls(self):
        self.assertIs(self.rec["tls"], True)

    def test_the_protocol_over_a_verified_tls_connection(self):
        c = TlsLine(self.port, self.cert)
        self.assertEqual(c.greeting, '+HI {"v":2}')
        self.assertEqual(c.cmd('HELLO {"v":2,"wid":"tls-py"}'), "+OK")
        self.assertEqual(c.cmd('PUSH {"jid":"tls-1","jobtype":"t","queue":"tlsq","args":[1]}'),
                         "+OK")
        self.assertEqual(json.loads(c.cmd("FETCH tlsq"))["jid"], "tls-1")
        self.assertEqual(c.cmd('ACK {"jid":"tls-1"}'), "+OK")
        st, b, _ = self.s.get("/v1/jobs/tls-1")
        self.assertEqual((st, b["job"]["state"]), (200, "completed"))
        c.close()

    def test_openssl_s_client_speaks_the_protocol(self):
        script = ('HELLO {"v":2}\r\nPUSH {"jid":"tls-s","jobtype":"t","queue":"tlss"}\r\n'
                  'END\r\n')
        r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % self.port,
                            "-CAfile", self.cert, "-verify_return_error", "-verify_hostname",
                            "localhost", "-quiet"],
                           input=script, capture_output=True, text=True, timeout=30)
        lines = [x for x in r.stdout.splitlines() if x.startswith(("+", "-"))]
        self.assertEqual(lines, ['+HI {"v":2}', "+OK", "+OK"], r.stdout + r.stderr)
        self.assertIn("verify return:1", r.stderr)
        st, b, _ = self.s.get("/v1/jobs/tls-s")
        self.assertEqual((st, b["job"]["state"]), (200, "waiting"))

    def test_a_plaintext_client_is_closed_without_a_reply_and_the_port_serves_on(self):
        for first in (b'HELLO {"v":2}\r\n', b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"):
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            sock.sendall(first)
            t0 = time.monotonic()
            data = b""
            while True:
                d = sock.recv(4096)
                if not d:
                    break
                data += d
            sock.close()
            self.assertLess(time.monotonic() - t0, 2.0, "closed at once")
            self.assertNotIn(b"+HI", data, "no plaintext greeting")
            self.assertNotIn(b"OK", data)
        self.s.wait_log("TLS handshake failed")
        c = TlsLine(self.port, self.cert)
        self.assertEqual(c.cmd('HELLO {"v":2}'), "+OK")
        c.close()

    def test_a_client_that_sends_nothing_is_closed_after_the_handshake_time(self):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=20)
        t0 = time.monotonic()
        self.assertEqual(sock.recv(4096), b"", "no greeting before the TLS handshake")
        took = time.monotonic() - t0
        sock.close()
        self.assertGreater(took, 9.0)
        self.assertLess(took, 15.0)

    def test_the_untrusted_certificate_is_refused_by_a_verifying_client(self):
        ctx = ssl.create_default_context()  # the system's CAs: not this certificate
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        with self.assertRaises(ssl.SSLCertVerificationError):
            ctx.wrap_socket(raw, server_hostname="localhost")
        raw.close()


@unittest.skipUnless(shutil.which("openssl"), "the openssl command is missing")
class FaktoryTlsNode(TlsServer, unittest.TestCase):
    """The npm client over TLS, with passwords (tokens)."""

    SERVER_ARGS = token_args()
    TOKEN = PASSWORDS["admin"]

    @classmethod
    def setUpClass(cls):
        require_node()
        super().setUpClass()

    def node(self, step):
        r = run_node(self.s, ("127.0.0.1", self.port), "step:" + step, FAKTORY_TLS_CA=self.cert)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r

    def test_push_fetch_ack_and_a_worker_with_the_ca(self):
        self.node("tls")

    def test_the_insecure_option_connects(self):
        self.node("tls_insecure")

    def test_without_the_ca_the_client_refuses_the_certificate(self):
        r = self.node("tls_untrusted")
        self.assertIn("DEPTH_ZERO_SELF_SIGNED_CERT", r.stderr)


@unittest.skipUnless(shutil.which("openssl"), "the openssl command is missing")
class FaktoryTlsStartup(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="errand-tls-")
        cls.cert, cls.key = make_cert(cls.dir)
        cls.cert2, cls.key2 = make_cert(cls.dir, "other")
        cls.notpem = os.path.join(cls.dir, "notpem.txt")
        with open(cls.notpem, "w") as f:
            f.write("this is not a certificate\n")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def serve(self, *args):
        with tempfile.TemporaryDirectory() as d:
            return run_errand(["serve", "--listen", "127.0.0.1:0", "--store",
                               "sqlite:" + os.path.join(d, "e.db")] + list(args), timeout=30)

    def refused(self, want, *args):
        rc, out, err = self.serve(*args)
        self.assertEqual(rc, 2, (args, err))
        self.assertIn(want, err, args)
        self.assertNotIn("listening", out + err)

    def test_one_flag_without_the_other_is_refused(self):
        fk = ("--faktory-listen", "127.0.0.1:0")
        self.refused("--faktory-tls-cert and --faktory-tls-key go together "
                     "(--faktory-tls-key is missing)", *fk, "--faktory-tls-cert", self.cert)
        self.refused("--faktory-tls-cert and --faktory-tls-key go together "
                     "(--faktory-tls-cert is missing)", *fk, "--faktory-tls-key", self.key)

    def test_the_flags_without_a_faktory_port_are_refused(self):
        self.refused("need --faktory-listen", "--faktory-tls-cert", self.cert,
                     "--faktory-tls-key", self.key)

    def test_bad_files_refuse_to_start_naming_the_flag_and_the_file(self):
        fk = ("--faktory-listen", "127.0.0.1:0")
        missing = os.path.join(self.dir, "nope.pem")
        self.refused("--faktory-tls-cert %s: No such file or directory" % missing, *fk,
                     "--faktory-tls-cert", missing, "--faktory-tls-key", self.key)
        self.refused("--faktory-tls-key %s: No such file or directory" % missing, *fk,
                     "--faktory-tls-cert", self.cert, "--faktory-tls-key", missing)
        self.refused("--faktory-tls-cert %s: not a usable PEM certificate chain" % self.notpem,
                     *fk, "--faktory-tls-cert", self.notpem, "--faktory-tls-key", self.key)
        self.refused("--faktory-tls-key %s: not a usable PEM private key" % self.notpem, *fk,
                     "--faktory-tls-cert", self.cert, "--faktory-tls-key", self.notpem)
        self.refused("--faktory-tls-key %s is not the key of the certificate" % self.key2, *fk,
                     "--faktory-tls-cert", self.cert, "--faktory-tls-key", self.key2)
        # the key as the certificate and the certificate as the key
        self.refused("not a usable PEM certificate chain", *fk,
                     "--faktory-tls-cert", self.key, "--faktory-tls-key", self.cert)

    def test_without_tls_the_listener_logs_tls_false(self):
        with Server(args=["--faktory-listen", "127.0.0.1:0"]) as s:
            rec, _ = fk_port(s)
            self.assertIs(rec["tls"], False)


if __name__ == "__main__":
    unittest.main()
