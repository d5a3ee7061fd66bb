#!/usr/bin/env python3
"""Control-request latency while slow clients attack a running server.

Opens --slow connections that drip one request-header byte every
--drip-ms (slowloris) and --idle connections that send nothing, then
measures --n control requests (GET /health, and a short POST
/v1/completions every fourth) on fresh connections. Prints p50/p99/max
latency in ms, as JSON with --json. Python standard library only.

  bench/slow_clients.py --port 8080 --slow 200 --idle 300 --n 200
"""
import argparse
import json
import resource
import socket
import threading
import time


def control(host, port, path, body, timeout_s):
    t = time.perf_counter()
    try:
        return _control(host, port, path, body, timeout_s, t)
    except OSError:  # timed out, refused or reset: a failed control request
        return (time.perf_counter() - t) * 1000, False


def _control(host, port, path, body, timeout_s, t):
    s = socket.create_connection((host, port), timeout=timeout_s)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if body is None:
        req = f"GET {path} HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n"
    else:
        req = (f"POST {path} HTTP/1.1\r\nHost: b\r\nConnection: close\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n{body}")
    s.sendall(req.encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    ok = data.startswith(b"HTTP/1.1 200")
    return (time.perf_counter() - t) * 1000, ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--slow", type=int, default=200)
    ap.add_argument("--idle", type=int, default=300)
    ap.add_argument("--drip-ms", type=int, default=1000)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--timeout-s", type=float, default=30)
    ap.add_argument("--json")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    slow, idle = [], []
    for _ in range(a.slow):
        s = socket.create_connection((a.host, a.port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: b\r\n")
        slow.append(s)
    for _ in range(a.idle):
        idle.append(socket.create_connection((a.host, a.port)))
    stop = threading.Event()

    def drip():
        while not stop.wait(a.drip_ms / 1000):
            for s in list(slow):
                try:
                    s.sendall(b"X")
                except OSError:
                    slow.remove(s)  # the server closed it (request deadline)

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    lat, failed = [], 0
    body = json.dumps({"prompt": "hello", "max_tokens": 4})
    for i in range(a.n):
        ms, ok = control(a.host, a.port, "/v1/completions" if i % 4 == 3 else "/health",
                         body if i % 4 == 3 else None, a.timeout_s)
        lat.append(ms)
        failed += not ok
        time.sleep(0.02)
    stop.set()
    lat.sort()
    out = {"slow": a.slow, "idle": a.idle, "drip_ms": a.drip_ms, "n": a.n, "failed": failed,
           "p50_ms": round(lat[len(lat) // 2], 2), "p99_ms": round(lat[len(lat) * 99 // 100], 2),
           "max_ms": round(lat[-1], 2), "slow_still_open": len(slow)}
    print(json.dumps(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
