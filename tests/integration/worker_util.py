# SPDX-License-Identifier: MIT
#
# Shared code of the worker integration tests (test_worker_*.py): runs
# `errand work` or the C example worker (examples/c_worker.c) as a child
# process against a harness.Server, collects its JSON log lines from stderr,
# and writes small shell-script job commands into a temp dir.

import glob
import json
import os
import signal
import stat
import subprocess
import threading

from harness import REPO_ROOT, clean_env, errand_bin


def example_worker_bin():
    """The C example worker: $ERRAND_EXAMPLE_WORKER, else the newest build*/c_worker."""
    b = os.environ.get("ERRAND_EXAMPLE_WORKER")
    if b:
        return b
    found = [p for p in glob.glob(os.path.join(REPO_ROOT, "build*", "c_worker")) if os.access(p, os.X_OK)]
    if not found:
        raise RuntimeError("set ERRAND_EXAMPLE_WORKER to the c_worker binary")
    return max(found, key=os.path.getmtime)


def write_script(directory, name, body):
    """Writes an executable /bin/sh script and returns its path."""
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


class Worker:
    """A worker process (argv) whose stderr lines are collected."""

    def __init__(self, argv, env=None):
        self.argv = argv
        self.lines = []
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=clean_env(env))
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

    @classmethod
    def work(cls, server, queues, cmd, *opts, env=None):
        argv = [errand_bin(), "work", "--server", "http://%s:%d" % (server.host, server.port)]
        for q in ([queues] if isinstance(queues, str) else queues):
            argv += ["--queue", q]
        return cls(argv + list(opts) + ["--"] + list(cmd), env=env)

    @classmethod
    def example(cls, server, queue, *opts):
        argv = [example_worker_bin(), "--server", "http://%s:%d" % (server.host, server.port),
                "--queue", queue]
        return cls(argv + list(opts))

    def _drain(self):
        for raw in iter(self.proc.stderr.readline, b""):
            with self._lock:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
        self.proc.stderr.close()

    def logs(self):
        """The JSON log lines parsed so far (other lines skipped)."""
        out = []
        with self._lock:
            lines = list(self.lines)
        for line in lines:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out

    def text(self):
        with self._lock:
            return "\n".join(self.lines[-80:])

    def join_drainer(self, timeout=5.0):
        """Waits until the stderr of an exited worker is read to its end."""
        self._drainer.join(timeout)

    def signal(self, sig):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout=20):
        """SIGTERM and wait; SIGKILL when it does not exit in time. Returns the exit code."""
        self.signal(signal.SIGTERM)
        rc = self.wait(timeout)
        if rc is None:
            self.proc.kill()
            self.proc.wait()
        self.join_drainer()  # its last lines are in self.lines
        return rc

    def kill(self):
        self.signal(signal.SIGKILL)
        self.proc.wait()
