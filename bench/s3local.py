"""A local S3-compatible test bucket: moto's server in its own process, and a small HTTP proxy in front
of it that adds a fixed latency per request and injects faults (503 SlowDown, 429, hangs, dropped
connections), also in its own process.

Both run as separate processes on 127.0.0.1 because DALI's ``Pipeline.build()`` holds the GIL: a server
in a thread of the process building a pipeline stops answering for that long (FACTS.md). The tests and
``python -m bench.storage`` use them; nothing here is needed to *use* object storage.

The proxy is configured at run time over HTTP (``PUT /__proxy__/config`` with a JSON body, see
:class:`Proxy.configure`) and counts requests and the body bytes it returned (``GET /__proxy__/stats``),
which is how the benchmark measures requests and bytes per image.

    python -m bench.s3local serve     # moto + proxy; prints the endpoint, Ctrl-C stops both
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CONTROL = "/__proxy__/"
# Credentials moto accepts (any); never real ones.
TEST_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (bound to port 0, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with status {proc.returncode} before answering at {url}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            return  # it answers (an error status is an answer)
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing answered at {url} within {timeout:.0f} s") from None
            time.sleep(0.05)


class _Process:
    """A server in a child process, stopped by its pid (children inherit stdin: never rely on it closing)."""

    def __init__(self, argv: list[str], url: str):
        self.url = url
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        try:
            _wait_http(url, self.proc)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL, as a server that dies or a network that goes away."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()


class MotoServer(_Process):
    """``python -m moto.server`` on 127.0.0.1 at a free port; ``endpoint`` is its URL."""

    def __init__(self, port: int | None = None):
        port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        super().__init__([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                         self.endpoint + "/moto-api/")


class Proxy(_Process):
    """This module's proxy in front of ``upstream``, on 127.0.0.1 at a free port; ``endpoint`` is its URL."""

    def __init__(self, upstream: str, port: int | None = None, latency_ms: float = 0.0):
        port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        super().__init__([sys.executable, "-m", "bench.s3local", "proxy", "--upstream", upstream, "--port", str(port),
                          "--latency-ms", str(latency_ms)], self.endpoint + CONTROL + "stats")

    def _call(self, method: str, name: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.endpoint + CONTROL + name, data=data, method=method)
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read() or b"{}")

    def configure(self, latency_ms: float = 0.0, faults: list[dict] | None = None,
                  drop_headers: list[str] | None = None) -> None:
        """Set the latency added to every request and the fault rules (replacing the previous ones).

        A fault rule: ``{"match": substring of the request path ("" for all), "method": "GET" (optional),
        "status": 503, "code": "SlowDown" (S3 error code in the XML body), "count": n (how many matching
        requests it answers; default unlimited), "action": "status" | "hang" | "drop" (hang: answer after
        ``hang_s``; drop: close the connection without an answer)}``. The first rule with requests left
        answers; other requests go upstream. ``drop_headers``: request headers removed before they go
        upstream (``["If-Match"]``: a gateway that ignores conditional requests).
        """
        self._call("PUT", "config", {"latency_ms": latency_ms, "faults": faults or [], "drop_headers": drop_headers or []})

    def stats(self, reset: bool = False) -> dict:
        """``{"requests": {method: n}, "bytes": {method: body bytes returned}, "faults": n, "if_match": {method:
        requests that carried an If-Match header}}``; a reset waits (up to 5 s) for the requests being forwarded,
        so that none started before it is counted after it."""
        return self._call("POST" if reset else "GET", "stats", {} if reset else None)


# --------------------------------------------------------------------------------- the proxy process
class _State:
    def __init__(self, upstream: str, latency_ms: float):
        self.upstream = upstream.split("://", 1)[1].rstrip("/")
        self.lock = threading.Lock()
        self.latency_ms, self.faults, self.drop_headers = latency_ms, [], frozenset()
        self.requests: dict[str, int] = {}
        self.if_match: dict[str, int] = {}
        self.bytes: dict[str, int] = {}
        self.faulted = 0
        self.in_flight = 0  # requests being forwarded upstream (counted when their answer arrives)
        self.idle = threading.Condition(self.lock)
        self.local = threading.local()

    def take_fault(self, method: str, path: str) -> dict | None:
        with self.lock:
            for rule in self.faults:
                if rule.get("method", method) != method or rule.get("match", "") not in path:
                    continue
                left = rule.get("count")
                if left is not None:
                    if left <= 0:
                        continue
                    rule["count"] = left - 1
                self.faulted += 1
                return rule
        return None

    def count(self, method: str, nbytes: int, if_match: bool = False) -> None:
        with self.lock:
            self.requests[method] = self.requests.get(method, 0) + 1
            self.if_match[method] = self.if_match.get(method, 0) + int(if_match)
            self.bytes[method] = self.bytes.get(method, 0) + nbytes

    def connection(self) -> http.client.HTTPConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection(self.upstream, timeout=60)
        return conn


def _handler(state: _State):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def _control(self, body: bytes) -> None:
            name = self.path[len(CONTROL):]
            if name == "config" and self.command == "PUT":
                cfg = json.loads(body)
                with state.lock:
                    state.latency_ms = float(cfg.get("latency_ms", 0.0))
                    state.faults = list(cfg.get("faults", []))
                    state.drop_headers = frozenset(h.lower() for h in cfg.get("drop_headers", []))
                out = {}
            elif name == "stats":
                with state.lock:
                    out = {"requests": dict(state.requests), "bytes": dict(state.bytes), "faults": state.faulted,
                           "if_match": dict(state.if_match)}
                    if self.command == "POST":  # a reset: requests forwarded before it are counted before it
                        state.idle.wait_for(lambda: state.in_flight == 0, timeout=5)
                        out = {"requests": dict(state.requests), "bytes": dict(state.bytes), "faults": state.faulted,
                               "if_match": dict(state.if_match)}
                        state.requests, state.bytes, state.faulted, state.if_match = {}, {}, 0, {}
            else:
                self.send_error(404)
                return
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if self.path.startswith(CONTROL):
                self._control(body)
                return
            if state.latency_ms:
                time.sleep(state.latency_ms / 1000.0)
            rule = state.take_fault(self.command, self.path)
            if rule is not None:
                action = rule.get("action", "status")
                if action == "drop":
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if action == "hang":
                    time.sleep(float(rule.get("hang_s", 3600)))
                    self.close_connection = True
                    return
                code = rule.get("code", "SlowDown")
                data = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                        f"<Message>injected by bench.s3local</Message></Error>").encode()
                self.send_response(int(rule.get("status", 503)))
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                return
            if_match = "If-Match" in self.headers
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("connection", "keep-alive") and k.lower() not in state.drop_headers}
            with state.lock:
                state.in_flight += 1
            try:
                for attempt in range(2):  # a kept-alive upstream connection may have been closed by the server
                    conn = state.connection()
                    try:
                        conn.request(self.command, self.path, body=body or None, headers=headers)
                        resp = conn.getresponse()
                        data = resp.read()
                        break
                    except (http.client.HTTPException, OSError):
                        conn.close()
                        state.local.conn = None
                        if attempt:
                            self.close_connection = True
                            with contextlib.suppress(OSError):
                                self.connection.shutdown(socket.SHUT_RDWR)
                            return
                state.count(self.command, len(data), if_match)
            finally:
                with state.lock:
                    state.in_flight -= 1
                    state.idle.notify_all()
            self.send_response(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length", "keep-alive", "date",
                                     "server"):
                    self.send_header(k, v)
            # HEAD answers carry the object's length without a body
            self.send_header("Content-Length", resp.getheader("Content-Length", "0") if self.command == "HEAD"
                             else str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

    return Handler


def _serve_proxy(upstream: str, port: int, latency_ms: float) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(_State(upstream, latency_ms)))
    server.daemon_threads = True
    server.request_queue_size = 256
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    server.serve_forever(poll_interval=0.1)


# --------------------------------------------------------------------------------- a bucket with data
def s3_client(endpoint: str):
    """A boto3 client for the local server (test credentials)."""
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=TEST_ENV["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=TEST_ENV["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")


def upload_folder(endpoint: str, folder: str | os.PathLike, bucket: str, prefix: str = "", client=None) -> int:
    """Copy every file below ``folder`` to ``s3://bucket/prefix...`` (the bucket is created); returns the count."""
    from concurrent.futures import ThreadPoolExecutor

    client = client or s3_client(endpoint)
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou, client.exceptions.BucketAlreadyExists):
        client.create_bucket(Bucket=bucket)
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file())

    def put(p: Path) -> None:
        key = prefix + p.relative_to(folder).as_posix()
        client.put_object(Bucket=bucket, Key=key, Body=p.read_bytes())

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, files))
    return len(files)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.s3local", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    px = sub.add_parser("proxy", help="run the latency/fault proxy in this process")
    px.add_argument("--upstream", required=True)
    px.add_argument("--port", type=int, required=True)
    px.add_argument("--latency-ms", type=float, default=0.0)
    sv = sub.add_parser("serve", help="moto + proxy until Ctrl-C")
    sv.add_argument("--latency-ms", type=float, default=0.0)
    args = p.parse_args(argv)
    if args.cmd == "proxy":
        _serve_proxy(args.upstream, args.port, args.latency_ms)
        return 0
    moto = MotoServer()
    proxy = Proxy(moto.endpoint, latency_ms=args.latency_ms)
    print(f"moto at {moto.endpoint}, proxy ({args.latency_ms} ms per request) at {proxy.endpoint}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        proxy.stop()
        moto.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
