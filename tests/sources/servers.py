"""Servers for the remote-source tests, on loopback only, started and
stopped by the tests:

- Nginx: Debian's nginx-light with a config of its own (a free port on
  127.0.0.1, not a daemon), for real HTTP range behaviour;
- FaultServer: a small threaded HTTP server of our own that serves byte
  ranges and misbehaves on request (drops connections, answers 500,
  ignores Range, stalls, changes the file, lies);
- PythonHttpServer: `python -m http.server`, which serves no byte ranges
  (every GET gets the whole file);
- Trickle: an asyncio server that answers with the headers of a byte
  range, then sends its body at a few bytes a second (slow enough to fail
  any minimum speed, fast enough that a read timeout never fires);
- Moto: moto's S3 server (moto_server), for s3:// names.
"""
import asyncio
import contextlib
import hashlib
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc=None, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------------------
# nginx

class Nginx:
    """nginx serving `root` on 127.0.0.1; `extra` goes into its server
    block.  .url(name) is a file's URL; .log() the access log lines
    (request, status, bytes sent, Range header)."""

    def __init__(self, root, workdir, extra="", ssl=None):
        self.root = Path(root)
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        scheme = "https" if ssl else "http"
        self.base = f"{scheme}://127.0.0.1:{self.port}"
        listen = f"127.0.0.1:{self.port}" + (" ssl" if ssl else "")
        tls = f"ssl_certificate {ssl[0]}; ssl_certificate_key {ssl[1]};" if ssl else ""
        user = "user root;" if os.geteuid() == 0 else ""
        d = self.dir
        (d / "nginx.conf").write_text(f"""
{user}
worker_processes 2;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 512; }}
http {{
  log_format ranges escape=none '$request|$status|$body_bytes_sent|$http_range|$http_if_range|$http_authorization';
  access_log {d}/access.log ranges;
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;
  uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  sendfile on;
  keepalive_requests 100000;
  types {{ application/octet-stream safetensors bin json; }}
  server {{
    listen {listen};
    {tls}
    root {self.root};
    {extra}
  }}
}}
""")
        self.proc = subprocess.Popen(["nginx", "-c", str(d / "nginx.conf"), "-p", str(d), "-g", "daemon off;"],
                                     stdout=subprocess.DEVNULL, stderr=open(d / "stderr.log", "wb"))
        try:
            wait_port(self.port, self.proc)
        except Exception:
            stop(self.proc)
            raise

    def url(self, name):
        return f"{self.base}/{name}"

    def log(self):
        """[(request line, status, bytes, range, if-range, authorization)].

        nginx writes a request's line after the response's last byte has
        left, so a client that has everything can read the log before its
        own request is in it (a CI failure): wait until the log has stayed
        the same for a while."""
        path = self.dir / "access.log"

        def text():
            return path.read_text() if path.exists() else ""

        seen, since, deadline = text(), time.monotonic(), time.monotonic() + 10
        while time.monotonic() - since < 0.2 and time.monotonic() < deadline:
            time.sleep(0.02)
            now = text()
            if now != seen:
                seen, since = now, time.monotonic()
        rows = []
        for line in seen.splitlines():
            parts = line.split("|")
            rows.append((parts[0], int(parts[1]), int(parts[2]), parts[3], parts[4], parts[5]))
        return rows

    def clear_log(self):
        # nginx keeps the file open: truncate it in place, once the lines of
        # requests already answered are in (see log), so none lands after.
        self.log()
        with contextlib.suppress(FileNotFoundError), open(self.dir / "access.log", "r+") as f:
            f.truncate(0)

    def close(self):
        stop(self.proc)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def nginx_available():
    return shutil.which("nginx") is not None


# ---------------------------------------------------------------------------
# A server of our own, for faults

class Behaviour:
    """What FaultServer does; every field may be changed between requests.

    drop_after      close the connection after this many body bytes, for
                    the first `drop_times` GETs with a body
    fail_status     answer this status to the first `fail_times` GETs
    ignore_range    answer every GET with the whole file (200)
    slow            seconds to sleep between 64 KiB pieces of a body
    stall           seconds to wait before sending the body (after headers)
    change_after    after this many GETs, serve `changed` (new bytes, new ETag)
    lie_range       shift the Content-Range start by this many bytes
    total_override  announce this total size in Content-Range
    length_override announce this Content-Length
    endless         after the headers of a 206, send bytes forever
    no_validators   send neither ETag nor Last-Modified
    linked_etag     send X-Linked-Etag: "<the SHA-256 of the bytes>", as the
                    Hugging Face Hub does for LFS files (a string: that value)
    drop_downloads  with drop_after: close the connection after that many
                    body bytes for the first `drop_downloads` GETs other
                    than ckpt's first request of a file (Range OPEN_RANGE):
                    with ignore_range, the whole downloads
    resume_ranges   with ignore_range, still answer a Range that starts past
                    byte 0 (a retry resuming a download) with a 206
    """

    def __init__(self):
        self.drop_after = None
        self.drop_times = 0
        self.fail_status = None
        self.fail_times = 0
        self.ignore_range = False
        self.slow = 0.0
        self.stall = 0.0
        self.change_after = None
        self.changed = None
        self.lie_range = 0
        self.total_override = None
        self.length_override = None
        self.endless = False
        self.no_validators = False
        self.linked_etag = None
        self.drop_downloads = 0
        self.resume_ranges = False


class _QuietServer(http.server.ThreadingHTTPServer):
    """A client hanging up (ckpt, once it has what it asked for) is no
    error worth a traceback."""

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


def handler(serve):
    """A request handler class (HTTP/1.1, quiet) calling serve(handler, head)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_HEAD(self):
            serve(self, head=True)

        def do_GET(self):
            serve(self, head=False)

    return Handler


# What ckpt asks first of a file: its first 256 KiB.
OPEN_RANGE = "bytes=0-262143"


class FaultServer:
    """Serves {name: bytes} with single byte ranges (If-Range honoured),
    misbehaving as `behaviour` says.  .requests lists (method, path,
    Range, If-Range, status) of every request."""

    def __init__(self, files):
        self.files = dict(files)
        self.behaviour = Behaviour()
        self.requests = []
        self.gets = 0
        self.lock = threading.Lock()
        self.httpd = _QuietServer(("127.0.0.1", 0), handler(self._serve))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name):
        return f"http://127.0.0.1:{self.port}/{name}"

    def _serve(self, h, head):
        b = self.behaviour
        name = h.path.lstrip("/").split("?")[0]
        rng, if_range = h.headers.get("Range"), h.headers.get("If-Range")
        with self.lock:
            if not head:
                self.gets += 1
            n = self.gets
            data = self.files.get(name)
            version = 0
            if data is not None and b.change_after is not None and n > b.change_after and b.changed is not None:
                data, version = b.changed, 1
            fail = not head and b.fail_status and b.fail_times > 0
            if fail:
                b.fail_times -= 1
            drop = not head and b.drop_after is not None and b.drop_times > 0 and rng
            if drop:
                b.drop_times -= 1
            elif not head and b.drop_after is not None and b.drop_downloads > 0 and rng != OPEN_RANGE:
                drop = True
                b.drop_downloads -= 1

        def record(status):
            with self.lock:
                self.requests.append(("HEAD" if head else "GET", h.path, rng, if_range, status))

        if data is None:
            record(404)
            h.send_response(404)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        if fail:
            record(b.fail_status)
            body = b"<html>try again</html>"
            h.send_response(b.fail_status)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        etag = '"' + hashlib.sha1(data).hexdigest()[:16] + f'-{version}"'
        modified = "Mon, 02 Jan 2023 03:04:0%d GMT" % version
        start, end, status = 0, len(data), 200
        resumed = rng and b.resume_ranges and not rng.startswith("bytes=0-")
        if rng and (not b.ignore_range or resumed) and (if_range is None or if_range in (etag, modified)):
            spec = rng.split("=", 1)[1]
            a, _, z = spec.partition("-")
            start = int(a)
            end = min(int(z) + 1, len(data)) if z else len(data)
            if start >= len(data):
                record(416)
                h.send_response(416)
                h.send_header("Content-Range", f"bytes */{len(data)}")
                h.send_header("Content-Length", "0")
                h.end_headers()
                return
            status = 206
        record(status)
        h.send_response(status)
        if not b.no_validators:
            h.send_header("ETag", etag)
            h.send_header("Last-Modified", modified)
        if b.linked_etag:
            linked = hashlib.sha256(data).hexdigest() if b.linked_etag is True else b.linked_etag
            h.send_header("X-Linked-Etag", f'"{linked}"')
        h.send_header("Accept-Ranges", "bytes")
        if status == 206:
            total = b.total_override if b.total_override is not None else len(data)
            h.send_header("Content-Range", f"bytes {start + b.lie_range}-{end - 1 + b.lie_range}/{total}")
        if b.endless and status == 206:
            h.send_header("Connection", "close")
            h.end_headers()
            if head:
                return
            chunk = b"\0" * 65536
            with contextlib.suppress(OSError):
                for _ in range(100000):  # 6.5 GB: "forever" for a test
                    h.wfile.write(chunk)
            return
        length = b.length_override if b.length_override is not None else end - start
        h.send_header("Content-Length", str(length))
        h.end_headers()
        if head:
            return
        if b.stall:
            time.sleep(b.stall)
        body = data[start:end]
        if drop:
            h.wfile.write(body[:b.drop_after])
            h.wfile.flush()
            h.close_connection = True
            with contextlib.suppress(OSError):
                h.connection.shutdown(socket.SHUT_RDWR)
            return
        with contextlib.suppress(OSError):
            if b.slow:
                for i in range(0, len(body), 65536):
                    h.wfile.write(body[i:i + 65536])
                    h.wfile.flush()
                    time.sleep(b.slow)
            else:
                h.wfile.write(body)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------------------
# python -m http.server

class PythonHttpServer:
    """`python -m http.server` serving `root` on 127.0.0.1, on a port it
    binds itself (0: no race for a free port), read back from the line it
    prints.  It serves no byte ranges: a GET with a Range header gets the
    whole file (200).  .url(name) is a file's URL; .gets(path) counts the
    GETs of a path in its log."""

    def __init__(self, root, workdir):
        self.log_path = Path(workdir) / "http.server.log"
        self.proc = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1",
                                      "--directory", str(root), "0"],
                                     stdout=subprocess.PIPE, stderr=open(self.log_path, "wb"), text=True)
        line = self.proc.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N (http://…/) ..."
        words = line.split()
        if "port" not in words:
            stop(self.proc)
            raise RuntimeError(f"python -m http.server did not start: {line!r}")
        self.port = int(words[words.index("port") + 1])
        self.base = f"http://127.0.0.1:{self.port}"

    def url(self, name):
        return f"{self.base}/{name}"

    def gets(self, path):
        return self.log_path.read_text().count(f'"GET /{path} ')

    def close(self):
        stop(self.proc)
        self.proc.stdout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------------------
# A server that trickles

class Trickle:
    """Answers every GET for a file of `size` bytes with a 206 and its
    headers at once, then the body at `rate` bytes a second until the
    client hangs up.  .url(name) is a file's URL; .requests counts GETs."""

    def __init__(self, size=1 << 20, rate=4):
        self.size, self.rate, self.requests = size, rate, 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def start():
            self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()

        self.thread = threading.Thread(target=self._run, args=(start(),), daemon=True)
        self.thread.start()
        ready.wait(10)

    def _run(self, start):
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(start)
        self.loop.run_forever()

    async def _serve(self, reader, writer):
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            self.requests += 1
            first, last = 0, self.size - 1
            for line in head.split("\r\n"):
                if line.lower().startswith("range: bytes="):
                    a, _, z = line.split("=", 1)[1].partition("-")
                    first, last = int(a), min(int(z) if z else last, self.size - 1)
            writer.write((f"HTTP/1.1 206 Partial Content\r\nETag: \"trickle\"\r\n"
                          f"Content-Range: bytes {first}-{last}/{self.size}\r\n"
                          f"Content-Length: {last - first + 1}\r\n\r\n").encode())
            for _ in range(last - first + 1):
                writer.write(b"\0")
                await writer.drain()
                await asyncio.sleep(1 / self.rate)
        writer.close()

    def url(self, name):
        return f"http://127.0.0.1:{self.port}/{name}"

    def close(self):
        async def stop():
            self.server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------------------
# moto's S3 server

class Moto:
    """moto_server on 127.0.0.1; .client() a boto3 S3 client on it;
    .env(key, secret) the variables that point ckpt at it."""

    def __init__(self, workdir, max_keys=None):
        """max_keys: the keys of a listing's page (moto's default, 1000, else)."""
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.recording = Path(workdir) / "moto-recording.jsonl"
        env = dict(os.environ, MOTO_RECORDER_FILEPATH=str(self.recording))
        if max_keys:
            env["MOTO_S3_DEFAULT_MAX_KEYS"] = str(max_keys)
        moto_server = Path(sys.executable).parent / "moto_server"
        self.proc = subprocess.Popen([str(moto_server), "-H", "127.0.0.1", "-p", str(self.port)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=open(Path(workdir) / "moto.log", "wb"))
        try:
            wait_port(self.port, self.proc, timeout=60)
        except Exception:
            stop(self.proc)
            raise

    def client(self, service="s3", key="testing", secret="testing", token=None):
        import boto3
        return boto3.client(service, endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id=key,
                            aws_secret_access_key=secret, aws_session_token=token)

    def env(self, key="testing", secret="testing", token=None, region="us-east-1"):
        e = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
             "AWS_REGION": region}
        if token:
            e["AWS_SESSION_TOKEN"] = token
        return e

    def enforce_auth(self):
        """From now on, moto checks every request's SigV4 signature (and
        the IAM policies of its key)."""
        import urllib.request
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/moto-api/reset-auth", data=b"0",
                                                      headers={"Content-Type": "text/plain"}, method="POST")).read()

    def _api(self, path):
        import urllib.request
        return urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/moto-api/{path}", data=b"0",
                                                             method="POST")).read()

    def record(self):
        """From now on, moto records every request (start afresh)."""
        self._api("recorder/reset-recording")
        self._api("recorder/start-recording")

    def recorded(self):
        """The requests recorded: (method, URL with query, Range header)."""
        import json
        self._api("recorder/stop-recording")
        lines = self.recording.read_text().splitlines() if self.recording.exists() else []
        return [(e["method"], e["url"], {k.lower(): v for k, v in e["headers"].items()}.get("range"))
                for e in map(json.loads, lines)]

    def close(self):
        stop(self.proc)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def moto_available():
    try:
        import boto3  # noqa: F401
        import moto  # noqa: F401
    except ImportError:
        return False
    return (Path(sys.executable).parent / "moto_server").exists()
