"""What this process holds, from /proc: its threads, and its TCP connections to a port (used
by test_change_stream.py and bench/listen_many.py)."""
from __future__ import annotations

import os


def threads() -> int:
    """Threads of this process (/proc/self/task)."""
    return len(os.listdir("/proc/self/task"))


def established_connections(port: int) -> int:
    """TCP connections of THIS process to ``port`` in state ESTABLISHED (its sockets' inodes
    matched against /proc/self/net/tcp and tcp6)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if fields[3] == "01" and remote_port == port and fields[9] in inodes:
                    count += 1
    return count
