"""Per thread, each second: the CPU it used and its voluntary context switches (wake-ups), for the processes whose
command line holds PATTERN; with the machine's idle, system and steal time. For telling where a node's CPU goes
beside a training loop: the training thread (marked T, the process's main thread), CAF's threads (caf.*) and the
data plane's (named as the process, python3 or gridnode).

    /usr/bin/python3 bench/thread_sampler.py --match fashion_mnist_mlp.py --processes 2 --seconds 30

It waits until PROCESSES such processes run, then prints a line a second: `PID%1000 THREAD:CPU%/WAKEUPS` for every
thread that used 1% of a core or woke 50 times. Reads /proc only: nothing is forked while it samples.
"""

import argparse
import glob
import os
import sys
import time


def matching(pattern, exclude):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            command = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
        except OSError:
            continue
        if pattern in command and not (exclude and exclude in command) and int(pid) != os.getpid():
            found.append(int(pid))
    return sorted(found)


def threads(pids):
    """(pid, tid) -> (name, CPU ticks, voluntary switches)."""
    out = {}
    for pid in pids:
        for task in glob.glob(f"/proc/{pid}/task/*"):
            try:
                stat = open(task + "/stat").read()
                status = open(task + "/status").read()
            except OSError:
                continue  # ended meanwhile
            name = stat.split("(", 1)[1].rsplit(")", 1)[0]
            fields = stat.rsplit(")", 1)[1].split()
            switches = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
            out[(pid, int(task.rsplit("/", 1)[1]))] = (name, int(fields[11]) + int(fields[12]), switches)
    return out


def machine():
    return [int(x) for x in open("/proc/stat").readline().split()[1:]]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--match", required=True, help="a part of the processes' command line")
    p.add_argument("--exclude", default="gridtrain.launch", help="skip command lines holding this (the launcher)")
    p.add_argument("--processes", type=int, default=1, help="wait until this many match")
    p.add_argument("--seconds", type=float, default=30)
    a = p.parse_args()
    ticks = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + 120
    while len(matching(a.match, a.exclude)) < a.processes:
        if time.monotonic() > deadline:
            sys.exit(f"error: fewer than {a.processes} processes matching '{a.match}' within 120 s")
        time.sleep(0.2)
    pids = matching(a.match, a.exclude)
    before, t0, m0 = threads(pids), time.monotonic(), machine()
    end = t0 + a.seconds
    while time.monotonic() < end:
        time.sleep(1)
        after, t1, m1 = threads(pids), time.monotonic(), machine()
        span = t1 - t0
        parts = []
        for key, (name, cpu, switches) in sorted(after.items()):
            if key not in before:
                continue
            used = 100 * (cpu - before[key][1]) / ticks / span
            woke = (switches - before[key][2]) / span
            if used >= 1 or woke >= 50:
                label = "T" if key[0] == key[1] else name
                parts.append(f"{key[0] % 1000}{label}:{used:.0f}%/{woke:.0f}")
        delta = [y - x for x, y in zip(m0, m1)]
        total = sum(delta) or 1
        print(f"{time.strftime('%H:%M:%S')} idle {100 * delta[3] / total:4.1f}% sys {100 * delta[2] / total:4.1f}% "
              f"steal {100 * delta[7] / total:4.1f}% | " + " ".join(parts), flush=True)
        before, t0, m0 = after, t1, m1
    return 0


if __name__ == "__main__":
    sys.exit(main())
