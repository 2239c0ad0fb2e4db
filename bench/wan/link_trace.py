#!/usr/bin/python3
"""Where a shaped link sat idle: each host's egress (its wan0's bytes sent) sampled every few milliseconds.

  link_trace.py record OUT INTERVAL_MS NETNS...   until SIGTERM: "SECONDS NETNS TX_BYTES" lines into OUT
  link_trace.py summary OUT RATE_MBIT [SKIP_S]    per host: its busy span, mean egress, and the idle time in it

A host's busy span runs from its first to its last interval carrying at least a tenth of the link's rate (the
first SKIP_S seconds of the trace left out: the programs' start and their untimed rounds). Within it, an interval
below half the link's rate counts as idle. So the idle seconds are where a program had the link and did not use
it: between rounds, while a round's pipeline filled or drained, or while a flow waited for a window.

Each namespace's counters are read from /proc/PID/net/dev of a sleeper started in it (one per namespace).
"""

import os
import signal
import subprocess
import sys
import time


def record(out, interval_ms, namespaces):
    sleepers = [subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "infinity"]) for ns in namespaces]
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        time.sleep(0.2)  # the sleepers are in their namespaces
        with open(out, "w") as f:
            t0 = time.monotonic()
            while not stop:
                for ns, s in zip(namespaces, sleepers):
                    with open("/proc/%d/net/dev" % s.pid) as dev:
                        text = dev.read()
                    now = time.monotonic() - t0  # each reading's own time: the reads of one pass take a while
                    for line in text.splitlines():
                        name, _, fields = line.partition(":")
                        if name.strip() == "wan0":
                            f.write("%.4f %s %s\n" % (now, ns, fields.split()[8]))
                time.sleep(interval_ms / 1000.0)
    finally:
        for s in sleepers:
            s.kill()
            s.wait()


def summary(out, rate_mbit, skip_s):
    samples = {}
    for line in open(out):
        t, ns, tx = line.split()
        samples.setdefault(ns, []).append((float(t), int(tx)))
    link = rate_mbit * 1e6 / 8  # bytes/s
    for ns, points in sorted(samples.items()):
        rates = []  # (start, seconds, bytes/s)
        for (t0, b0), (t1, b1) in zip(points, points[1:]):
            if t0 >= skip_s and t1 > t0:
                rates.append((t0, t1 - t0, (b1 - b0) / (t1 - t0)))
        busy = [i for i, r in enumerate(rates) if r[2] >= 0.1 * link]
        if not busy:
            print("%s: no traffic" % ns)
            continue
        span = rates[busy[0]:busy[-1] + 1]
        seconds = sum(r[1] for r in span)
        sent = sum(r[1] * r[2] for r in span)
        idle = sum(r[1] for r in span if r[2] < 0.5 * link)
        print("%s: busy span %.2f s, egress %.2f MB/s (%.0f%% of the link), idle %.2f s (%.0f%%)" %
              (ns, seconds, sent / seconds / 1e6, 100 * sent / seconds / link, idle, 100 * idle / seconds))


def main(argv):
    if len(argv) >= 4 and argv[1] == "record":
        record(argv[2], float(argv[3]), argv[4:])
    elif len(argv) in (4, 5) and argv[1] == "summary":
        summary(argv[2], float(argv[3]), float(argv[4]) if len(argv) == 5 else 0.0)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
