#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# The layer check (docs: ARCHITECTURE.md section 3; STYLE.md "Includes point
# down the layer map only"). Reads every .c and .h file under src/ and
# include/ and fails on:
#
#  - an include of one of our headers ("core/job.h", <store/store.h>, or a
#    file beside the includer) from a layer that may not use it:
#      util    -> util
#      core    -> util, core
#      store   -> util, core, store
#      engine  -> util, core, store, engine
#      server  -> util, core, store, engine, server
#      client  -> util, client, include/ (liberrand sits on util only), and
#                 the core headers in CLIENT_CORE below: core files liberrand
#                 compiles in itself (CMakeLists.txt), which use util only
#      client_pg -> include/ (liberrand-pg: libpq and the public header)
#      include -> include/ (the public header shows nothing internal)
#      cli     -> anything; tests/, bench/ and examples/ are not checked.
#  - in src/core (pure logic: no I/O, no clock, no environment, no threads),
#    a system header outside CORE_HEADERS below, or a call to one of
#    CORE_BANNED_CALLS. <stdio.h> is allowed for snprintf-style formatting
#    only: its reading, writing and file functions are in the banned list.
#    <time.h> is not allowed (core takes the time as an argument).
#
# Known violations live in tests/layers_allow.txt, one per line, as the
# report prints them ("src/core/cron.c: header <unistd.h>"). The check also
# fails on a line there that no longer occurs, so the list can only shrink.
#
#   check_layers.py [ROOT]     check the tree at ROOT (default: the parent of tests/)
#   check_layers.py --self-test
import os
import re
import sys
import tempfile

LAYERS = {"util", "core", "store", "engine", "server", "client", "client_pg", "cli"}
MAY_USE = {
    "util": {"util"},
    "core": {"util", "core"},
    "store": {"util", "core", "store"},
    "engine": {"util", "core", "store", "engine"},
    "server": {"util", "core", "store", "engine", "server"},
    "client": {"util", "client", "include"},
    "client_pg": {"include"},
    "include": {"include"},
    "cli": None,  # anything
}

# Core files liberrand carries (their .c is compiled into it, so they may
# include util headers only: the core rules below check that).
CLIENT_CORE = {"core/http_outcome.h"}
CLIENT_CORE_SOURCES = {"src/core/http_outcome.h", "src/core/http_outcome.c"}

# C standard headers that do no I/O, and the two libraries core computes with.
CORE_HEADERS = {
    "assert.h", "ctype.h", "errno.h", "float.h", "inttypes.h", "limits.h", "math.h",
    "stdalign.h", "stdarg.h", "stdbool.h", "stddef.h", "stdint.h", "stdio.h", "stdlib.h",
    "string.h", "strings.h",
    "jansson.h",       # JSON values in and out of the validators
    "openssl/evp.h",   # SHA-256 of lease idempotency keys
}

CORE_BANNED_CALLS = {
    # files and descriptors
    "open", "openat", "creat", "read", "write", "pread", "pwrite", "close", "lseek",
    "stat", "fstat", "lstat", "access", "unlink", "mkdir", "opendir", "readdir", "closedir",
    "mmap", "fsync", "ioctl", "fcntl", "socket", "connect", "send", "recv", "poll", "select",
    # stdio beyond formatting into a buffer
    "fopen", "fdopen", "freopen", "fclose", "fflush", "fread", "fwrite", "fgets", "fgetc",
    "getc", "getchar", "fputs", "fputc", "putc", "putchar", "puts", "printf", "fprintf",
    "vprintf", "vfprintf", "dprintf", "perror", "getline", "getdelim", "popen", "pclose",
    "remove", "rename", "tmpfile", "fseek", "ftell", "rewind", "setvbuf",
    # environment, processes
    "getenv", "secure_getenv", "setenv", "unsetenv", "putenv", "system", "fork", "exec",
    "execv", "execvp", "execl", "sleep", "usleep", "nanosleep",
    # clocks, time zones of the process, random sources (inject them instead)
    "time", "clock", "clock_gettime", "gettimeofday", "localtime", "localtime_r", "mktime",
    "tzset", "rand", "srand", "random", "srandom", "getrandom", "getentropy",
    # threads
    "pthread_create", "pthread_mutex_lock", "pthread_mutex_unlock", "pthread_cond_wait",
}

INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)
CALL_RE = re.compile(r"(?<![\w.>$])(\w+)\s*\(")
# Comments become spaces (newlines kept); with strip_strings, string and
# character literals too. Strings are matched first so "/*" inside one is text.
TOKEN_RE = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|/\*.*?\*/|//[^\n]*', re.S)


def strip(text, strip_strings):
    def blank(m):
        s = m.group(0)
        if s[0] in "\"'" and not strip_strings:
            return s
        return re.sub(r"[^\n]", " ", s)
    return TOKEN_RE.sub(blank, text)


def layer_of(rel):
    """The layer of a path relative to the root, or None when not checked."""
    parts = rel.split("/")
    if parts[0] == "include":
        return "include"
    if parts[0] == "src" and len(parts) > 2 and parts[1] in LAYERS:
        return parts[1]
    return None


def target_layer(root, rel, name):
    """The layer of the header an include names, or None for a system header."""
    first = name.split("/")[0]
    if first in LAYERS and "/" in name:
        return first
    if first == "errand" and "/" in name:
        return "include"
    beside = os.path.normpath(os.path.join(os.path.dirname(rel), name))
    if os.path.exists(os.path.join(root, beside)):
        return layer_of(beside)
    return None


def check_file(root, rel):
    found = set()
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        text = f.read()
    layer = layer_of(rel)
    allowed = MAY_USE[layer]
    for m in INCLUDE_RE.finditer(strip(text, False)):
        quote, name = m.group(1), m.group(2).strip()
        target = target_layer(root, rel, name)
        if target is not None:
            if layer == "client" and name in CLIENT_CORE:
                continue
            if rel in CLIENT_CORE_SOURCES and target == "core" and name not in CLIENT_CORE:
                found.add(f"{rel}: include \"{name}\" (liberrand compiles this file: util only)")
            if allowed is not None and target not in allowed:
                found.add(f"{rel}: include \"{name}\" ({layer} may not use {target})")
        elif quote == "<" and layer == "core" and name not in CORE_HEADERS:
            found.add(f"{rel}: header <{name}>")
        elif rel in CLIENT_CORE_SOURCES and name.startswith("openssl/"):
            found.add(f"{rel}: header <{name}> (liberrand links no libcrypto)")
    if layer == "core":
        code = strip(text, True)
        # A function pointer of the same name declared in the file ("(*write)") is not the call.
        local = set(re.findall(r"\(\s*\*\s*(\w+)\s*\)\s*\(", code))
        for m in CALL_RE.finditer(code):
            if m.group(1) in CORE_BANNED_CALLS and m.group(1) not in local:
                found.add(f"{rel}: call {m.group(1)}()")
    return found


def scan(root):
    found = set()
    for top in ("src", "include"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for fn in sorted(filenames):
                if fn.endswith((".c", ".h")):
                    rel = os.path.relpath(os.path.join(dirpath, fn), root).replace(os.sep, "/")
                    found |= check_file(root, rel)
    return found


def read_allow(path):
    allow = set()
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    allow.add(line)
    return allow


def check(root, allow_path):
    found = scan(root)
    allow = read_allow(allow_path)
    new = sorted(found - allow)
    gone = sorted(allow - found)
    for v in new:
        print(f"layer violation: {v}")
    for v in gone:
        print(f"fixed, so remove it from {os.path.relpath(allow_path, root)}: {v}")
    print(f"check_layers: {len(found & allow)} known violations allowed, {len(new)} new, "
          f"{len(gone)} stale allow-list lines")
    return 1 if new or gone else 0


def self_test():
    """Each rule fires on a small tree, and the allow list works both ways."""
    files = {
        "src/util/u.h": '#include "core/job.h"\n',
        "src/core/job.h": "#include <stdio.h>\n#include <jansson.h>\n",
        "src/core/a.c": ('#include "core/job.h"\n#include <unistd.h>\n#include <time.h>\n'
                         '/* read(fd) in a comment */\nstatic const char *s = "fopen(x)";\n'
                         "int f(struct r *p, void (*write)(int)) { p->read(1); er_open(2);"
                         " write(3); snprintf(0, 0, \"\"); return getenv(\"X\") != 0; }\n"),
        "src/core/b.c": '#include "engine/engine.h"\n#include <openssl/evp.h>\n',
        "src/store/s.c": '#include "engine/engine.h"\n#include "core/job.h"\n',
        "src/client/c.c": ('#include "core/job.h"\n#include "errand/errand.h"\n#include "c.h"\n'
                           '#include "core/http_outcome.h"\n'),
        "src/core/http_outcome.c": ('#include "core/http_outcome.h"\n#include "core/job.h"\n'
                                    "#include <openssl/evp.h>\n"),
        "src/client/c.h": "\n",
        "src/cli/m.c": '#include "server/http/x.h"\n#include "errand/errand.h"\n',
        "include/errand/errand.h": '#include "util/err.h"\n',
    }
    want = {
        'src/util/u.h: include "core/job.h" (util may not use core)',
        "src/core/a.c: header <unistd.h>",
        "src/core/a.c: header <time.h>",
        "src/core/a.c: call getenv()",
        'src/core/b.c: include "engine/engine.h" (core may not use engine)',
        'src/store/s.c: include "engine/engine.h" (store may not use engine)',
        'src/client/c.c: include "core/job.h" (client may not use core)',
        'src/core/http_outcome.c: include "core/job.h" (liberrand compiles this file: util only)',
        "src/core/http_outcome.c: header <openssl/evp.h> (liberrand links no libcrypto)",
        'include/errand/errand.h: include "util/err.h" (include may not use util)',
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        got = scan(root)
        if got != want:
            print("self-test: unexpected result")
            for v in sorted(got - want):
                print(f"  extra:   {v}")
            for v in sorted(want - got):
                print(f"  missing: {v}")
            return 1
        allow = os.path.join(root, "allow.txt")
        with open(allow, "w") as f:
            f.write("# comment\n" + "\n".join(sorted(want)) + "\n")
        if check(root, allow) != 0:
            print("self-test: a complete allow list should pass")
            return 1
        with open(allow, "a") as f:
            f.write("src/core/a.c: call open()\n")
        if check(root, allow) != 1:
            print("self-test: a stale allow-list line should fail")
            return 1
    print("self-test: ok")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) > 2:
        print("usage: check_layers.py [ROOT] | --self-test")
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(argv[1]) if len(argv) == 2 else os.path.dirname(here)
    return check(root, os.path.join(root, "tests", "layers_allow.txt"))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
