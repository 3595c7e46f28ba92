# SPDX-License-Identifier: MIT
#
# Starts and supervises the shop's processes (the fakes, errand, the Orders
# API, the workers) for examples/shop/run, the project's test
# (tests/integration/test_shop.py) and bench/shop_chaos.py. A process that
# dies is started again by the supervisor, unless it was stopped on purpose.
# Python standard library only.

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
# Each queue's own worker concurrency (the operations items of README.md).
ROLE_ENV = {"critical": {"SHOP_CONCURRENCY": "8"}, "default": {"SHOP_CONCURRENCY": "4"},
            "bulk": {"SHOP_CONCURRENCY": "2"}, "maintenance": {"SHOP_CONCURRENCY": "1"}}
WORKERS = {"payments": 2, "shipping": 1, "loyalty": 1, "critical": 1, "default": 1, "bulk": 1,
           "maintenance": 1}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, headers=None, timeout=5):
    """(status, parsed JSON or None); status 0 when no answer came."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw) if raw else None
        except ValueError:
            return e.code, None
    except (OSError, ValueError):
        return 0, None


def bins_from(build_dir):
    return {"errand": os.path.join(build_dir, "errand"),
            "api": os.path.join(build_dir, "examples", "shop", "shop_api"),
            "worker": os.path.join(build_dir, "examples", "shop", "shop_worker"),
            "setup": os.path.join(build_dir, "examples", "shop", "shop_setup")}


class Proc:
    def __init__(self, name, argv, env, log_path, ready_url):
        self.name, self.argv, self.env, self.log_path = name, argv, env, log_path
        self.ready_url = ready_url
        self.p = None
        self.down = False      # stopped on purpose: not restarted
        self.deaths = []       # exit codes of unplanned deaths
        self.starts = 0

    def start(self):
        log = open(self.log_path, "ab")
        self.p = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL,
                                  stdout=log, stderr=log, start_new_session=True)
        log.close()
        self.starts += 1
        self.down = False

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def wait_ready(self, timeout=20):
        if not self.ready_url:
            return True
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.alive():
                return False
            st, _ = http("GET", self.ready_url, timeout=1)
            if st:
                return True
            time.sleep(0.05)
        return False

    def kill(self, sig=signal.SIGKILL):
        if self.alive():
            self.p.send_signal(sig)
        if self.p is not None:
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


class Shop:
    """One shop: the application database db_url (its outbox tables
    installed), errand on store_url, and the processes around them."""

    def __init__(self, workdir, bins, db_url, store_url, queues=None, workers=None,
                 worker_env=None, numbers=(10000, 20000, 30000), fake_args=None, ports=None):
        self.workdir, self.bins, self.db_url, self.store_url = workdir, bins, db_url, store_url
        self.ports = dict(ports or {})
        for k in ("errand", "api", "gateway", "carrier", "mail"):
            self.ports.setdefault(k, free_port())
        self.url = {k: "http://127.0.0.1:%d" % p for k, p in self.ports.items()}
        if queues is None:
            with open(os.path.join(HERE, "queues.json")) as f:
                queues = json.load(f)
        self.queues = queues
        self.workers = workers or dict(WORKERS)
        self.worker_env = dict(worker_env or {})
        self.numbers = numbers
        self.fake_args = fake_args or {}
        self.procs = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sup = None

    def env(self, extra=None):
        e = {k: v for k, v in os.environ.items() if not k.startswith(("ERRAND_", "SHOP_"))}
        e.update({"SHOP_DB": self.db_url, "ERRAND_URL": self.url["errand"],
                  "GATEWAY_URL": self.url["gateway"], "CARRIER_URL": self.url["carrier"],
                  "MAIL_URL": self.url["mail"],
                  "SHOP_API_LISTEN": "127.0.0.1:%d" % self.ports["api"],
                  "SHOP_JOB_TIMEOUT_MS": str(self.numbers[0]),
                  "SHOP_GRACE_MS": str(self.numbers[1]), "SHOP_LEASE_MS": str(self.numbers[2])})
        e.update(extra or {})
        return e

    def _add(self, name, argv, env, ready):
        self.procs[name] = Proc(name, argv, env, os.path.join(self.workdir, name + ".log"), ready)

    def define(self):
        py = sys.executable or "python3"
        for kind in ("gateway", "carrier", "mail"):
            self._add(kind, [py, os.path.join(HERE, "fakes.py"), kind,
                             "--port", str(self.ports[kind]),
                             "--db", os.path.join(self.workdir, kind + ".db")]
                      + list(self.fake_args.get(kind, [])), self.env(), self.url[kind] + "/")
        routes = os.path.join(HERE, "routes.json")
        self._add("errand", [self.bins["errand"], "serve", "--listen",
                             "127.0.0.1:%d" % self.ports["errand"], "--store", self.store_url,
                             "--outbox-db", self.db_url, "--outbox-routes", routes,
                             "--outbox-poll", "100ms", "--shutdown-grace", "5s"],
                  self.env({"ERRAND_URL": ""}), self.url["errand"] + "/healthz")
        self._add("api", [self.bins["api"]], self.env(), self.url["api"] + "/healthz")
        for role, n in self.workers.items():
            for i in range(1, n + 1):
                env = dict(self.worker_env)
                env.update(ROLE_ENV.get(role, {}))
                self._add("%s-%d" % (role, i), [self.bins["worker"], role], self.env(env), None)

    def setup(self):
        qpath = os.path.join(self.workdir, "queues.json")
        with open(qpath, "w") as f:
            json.dump(self.queues, f, indent=1)
        out = subprocess.run([self.bins["setup"], os.path.join(HERE, "schema.sql"), qpath,
                              os.path.join(HERE, "schedulers.json")],
                             env=self.env(), capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError("shop_setup failed: %s%s" % (out.stdout, out.stderr))

    def start(self):
        """Starts everything; the database must have its outbox tables."""
        self.define()
        order = ["gateway", "carrier", "mail", "errand"]
        for name in order:
            self.procs[name].start()
            if not self.procs[name].wait_ready():
                raise RuntimeError("%s did not start:\n%s" % (name, self.tail(name)))
        self.setup()
        for name, p in self.procs.items():
            if name not in order:
                p.start()
        if not self.procs["api"].wait_ready():
            raise RuntimeError("api did not start:\n%s" % self.tail("api"))
        self._sup = threading.Thread(target=self._supervise, daemon=True)
        self._sup.start()
        return self

    def _supervise(self):
        while not self._stop.wait(0.1):
            with self._lock:
                for p in self.procs.values():
                    if not p.down and p.p is not None and p.p.poll() is not None:
                        p.deaths.append(p.p.returncode)
                        p.start()

    def kill(self, name, sig=signal.SIGKILL):
        """Kills name; the supervisor starts it again unless stop() follows."""
        with self._lock:
            p = self.procs[name]
            p.down = True
        p.kill(sig)
        return p

    def revive(self, name):
        with self._lock:
            p = self.procs[name]
            if not p.alive():
                p.start()
            p.down = False
        return p

    def stop(self, name, sig=signal.SIGTERM):
        with self._lock:
            self.procs[name].down = True
        self.procs[name].kill(sig)

    def stop_all(self):
        self._stop.set()
        if self._sup:
            self._sup.join(5)
        for name in reversed(list(self.procs)):
            self.procs[name].down = True
            self.procs[name].kill(signal.SIGTERM)

    def tail(self, name, n=40):
        try:
            with open(os.path.join(self.workdir, name + ".log"), "rb") as f:
                return b"".join(f.readlines()[-n:]).decode("utf-8", "replace")
        except OSError:
            return ""

    # ---- the shop's clients ----

    def authorize(self, amount, tries=200):
        for _ in range(tries):
            st, body = http("POST", self.url["gateway"] + "/authorizations", {"amount": amount})
            if st == 201:
                return body["id"]
            time.sleep(0.05)
        raise RuntimeError("the gateway never authorized")

    def place(self, tenant, customer, amount, request_key, auth=None, tries=400):
        """Places one order, retrying with the same Idempotency-Key until the
        API answers; returns the order id."""
        auth = auth or self.authorize(amount)
        body = {"tenant": tenant, "customer_id": customer, "amount": amount,
                "authorization_id": auth}
        for _ in range(tries):
            st, out = http("POST", self.url["api"] + "/orders", body,
                           {"Idempotency-Key": request_key})
            if st in (200, 202):
                return out["order_id"]
            time.sleep(0.05)
        raise RuntimeError("the API never took order %s" % request_key)
