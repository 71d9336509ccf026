"""Writes a C program of the size real services reach (tens of MB of debug info):
UNITS translation units, each including the usual system headers (every type they
declare is written again in every unit's DWARF, -fno-eliminate-unused-debug-types, as
in programs built with it or with large headers of their own) and defining a struct,
functions that take it and a helper inlined into each of them. Also writes
probes.yaml: 20 probes over units far apart. 1,600 units: a 40 MB separate debug file.

Usage: python gen.py OUT_DIR [UNITS]   (then: make -C OUT_DIR)
"""

from __future__ import annotations

import sys
from pathlib import Path

HEADERS = ("stdio.h", "stdlib.h", "string.h", "pthread.h", "signal.h", "time.h",
           "unistd.h", "fcntl.h", "sys/socket.h", "sys/stat.h", "sys/epoll.h",
           "netinet/in.h", "netinet/tcp.h", "arpa/inet.h", "netdb.h", "poll.h",
           "sched.h", "stdint.h", "errno.h", "dirent.h", "locale.h", "wchar.h")
PER_UNIT = 12


def unit(i: int) -> str:
    out = [f"#include <{h}>" for h in HEADERS]
    out += [f"struct job{i} {{ long id; int state; double weight; char name[24]; "
            f"struct sockaddr_in peer; struct job{i} *next; }};"]
    out += [f"long u{i}_f{j}(struct job{i} *job, long n);" for j in range(PER_UNIT)]
    # a helper the compiler inlines into each function, as real programs' are
    out += [f"static inline long u{i}_clamp(long v) {{ return v < 0 ? -v : v & 0xffff; }}"]
    for j in range(PER_UNIT):
        out += [f"__attribute__((noinline)) long u{i}_f{j}(struct job{i} *job, long n) {{",
                f"    long acc = u{i}_clamp(job->id + n * {j + 1});",
                "    for (int k = 0; k < job->state; k++) acc += k * (long)job->weight;",
                "    job->state = (int)(acc & 7);",
                f"    return acc + (job->next ? u{i}_f{(j + 1) % PER_UNIT}(job->next, n - 1) : 0);",
                "}"]
    out += [f"long unit{i}(long n) {{",
            f"    struct job{i} a = {{ .id = n, .state = 3, .weight = 1.5, .name = \"u{i}\" }};",
            f"    struct job{i} b = {{ .id = n + 1, .state = 2, .weight = 2.5, .next = &a }};",
            "    long acc = 0;"]
    out += [f"    acc += u{i}_f{j}(&b, n);" for j in range(PER_UNIT)]
    out += ["    return acc;", "}"]
    return "\n".join(out) + "\n"


def main() -> int:
    out = Path(sys.argv[1])
    units = int(sys.argv[2]) if len(sys.argv) > 2 else 1600
    out.mkdir(parents=True, exist_ok=True)
    for i in range(units):
        (out / f"u{i}.c").write_text(unit(i))
    decls = "\n".join(f"long unit{i}(long n);" for i in range(units))
    calls = "\n".join(f"        acc += unit{i}(n);" for i in range(units))
    (out / "main.c").write_text(
        f"#include <stdio.h>\n#include <unistd.h>\n{decls}\n"
        "int main(void) {\n    long acc = 0;\n    for (long n = 0;; n++) {\n"
        f"{calls}\n        printf(\"%ld\\n\", acc);\n        fflush(stdout);\n"
        "        usleep(100000);\n    }\n}\n")
    objs = " ".join(f"u{i}.o" for i in range(units))
    (out / "Makefile").write_text(
        "CFLAGS = -O2 -g -fno-eliminate-unused-debug-types\n"
        f"c-large: main.o {objs}\n\t$(CC) -o $@ $^\n"
        "\tobjcopy --only-keep-debug $@ $@.debug\n"
        "\tobjcopy --strip-debug --add-gnu-debuglink=$@.debug $@\n")
    probes = ["version: 1", "targets:", "  large:", "    binary: c-large", "probes:"]
    for p in range(20):
        i = p * (units // 20)
        probes += [f"  - name: p{p}", f"    function: u{i}_f{p % PER_UNIT}", "    values:",
                   "      id: job.id", "      state: job.state",
                   "      peer_port: job.peer.sin_port", "      n: n"]
    (out / "probes.yaml").write_text("\n".join(probes) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
