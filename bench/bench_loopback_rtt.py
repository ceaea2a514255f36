"""The host's floor under the C1 TTFT figure: a 1-byte loopback TCP round trip (issue 32 item 5).

Two processes pinned to CPU 0 and CPU 1 (as ``bench_client.py`` pins the client and the
server), blocking sockets with TCP_NODELAY, 5,000 round trips to 127.0.0.1 (``--n``);
prints the median, p10 and p90 in µs. A C1 TTFT is one such round trip plus the
client's request write and first-event parse and the server's request handling and
first write, so on the same host it cannot read below this figure.

    python bench/bench_loopback_rtt.py
"""

from __future__ import annotations

import argparse
import os
import socket
import time


def _echo(listener: socket.socket) -> None:
    """The child: echo every read back until the peer closes (pinned to CPU 1)."""
    os.sched_setaffinity(0, {1})
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        data = conn.recv(64)
        if not data:
            os._exit(0)
        conn.sendall(data)


def round_trips_us(n: int) -> list[float]:
    """``n`` 1-byte round trips (µs each, sorted) between this process (CPU 0) and an echo child (CPU 1)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    pid = os.fork()
    if pid == 0:
        _echo(listener)
    os.sched_setaffinity(0, {0})
    sock = socket.create_connection(listener.getsockname())
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = []
    for _ in range(n):
        t = time.perf_counter_ns()
        sock.sendall(b"x")
        sock.recv(64)
        out.append((time.perf_counter_ns() - t) / 1e3)
    sock.close()
    os.waitpid(pid, 0)
    listener.close()
    return sorted(out)


def main() -> None:
    """Print the round trip's median, p10 and p90 (µs) and the load average."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5000, help="round trips (default 5000)")
    n = ap.parse_args().n
    xs = round_trips_us(n)
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"loopback TCP 1-byte round trip, 2 processes pinned to cpu0/cpu1, blocking sockets, {n} trips: "
          f"p50 {xs[n // 2]:.1f} us, p10 {xs[n // 10]:.1f}, p90 {xs[9 * n // 10]:.1f} (load average {load})")


if __name__ == "__main__":
    main()
