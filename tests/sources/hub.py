"""A Hugging Face Hub for the tests, on loopback: the API and the resolve/
endpoints as huggingface_hub (file_download.py, hf_api.py) calls them, with
the Hub's headers, redirects, ETags and error headers.

- GET  /api/models/{repo}[/revision/{rev}]        sha, siblings (rfilename,
       size, blobId, lfs), private, gated
- GET  /api/models/{repo}/tree/{rev}[/{path}]     ?recursive=, entries as
       list_repo_tree reads them (type, oid, size, path, lfs)
- HEAD/GET /{repo}/resolve/{rev}/{path}           X-Repo-Commit; an LFS file:
       302 to /cdn/{sha256} with X-Linked-Etag ("sha256"), X-Linked-Size and
       ETag; any other file: 200 (byte ranges), ETag = its git blob id
- GET  {cdn}/cdn/{sha256}                         the LFS bytes, byte ranges,
       ETag "sha256", from another host (127.0.0.2), needing no credentials
       (the real CDN URL is signed)

Repos are private (a token in `tokens`, else 401 RepoNotFound) or gated
(no token: 401 GatedRepo; a token without access: 403 GatedRepo), with the
Hub's X-Error-Code / X-Error-Message headers.  Branches move with
set_branch().  Faults: `corrupt` (the CDN serves other bytes than the SHA-256
it states), `drop_after`/`drop_times` (the CDN cuts a body after that many
bytes), `cut_at` (the CDN ends every body at that byte of the file: a
connection that always drops there), `flip_once` (the next CDN body that
holds that byte of the file has it XORed with `flip_mask`, 0xFF unless
set: a copy that goes wrong once),
`whole_on_resume` (the CDN answers a range that does not start at byte 0
with the whole file, HTTP 200, as a server without ranges does).  `throttle` = (bytes, seconds): the CDN
writes bodies in runs of that many bytes, pausing after each; `.finished`
holds, per CDN path, the time.monotonic() at which the file's last byte was
written.  `.requests` logs (method, path, Range, status, bytes sent, Authorization);
`.written` counts the body bytes actually written to the sockets.

A file's content is its bytes, or an OnDisk(path): a file served from disk
(sendfile, in the page cache or not, never read into this process), for the
benchmarks' GB-sized models (bench/transformers_hub_suite.py)."""
import contextlib
import hashlib
import json
import os
import socket
import threading
import time
import urllib.parse

from servers import _QuietServer, handler

LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".msgpack", ".h5", ".npz")


class OnDisk:
    """A file of a repo served from disk.  Its git blob id and SHA-256 are
    computed once here, in one pass (the Hub states both; hashing a GB file
    on every request would time the server, not the clients)."""

    def __init__(self, path):
        self.path = str(path)
        self.size = os.path.getsize(self.path)
        sha1, sha256 = hashlib.sha1(b"blob %d\0" % self.size), hashlib.sha256()
        with open(self.path, "rb") as f:
            while chunk := f.read(8 << 20):
                sha1.update(chunk)
                sha256.update(chunk)
        self.blob_id, self.sha256 = sha1.hexdigest(), sha256.hexdigest()


def git_blob_id(data):
    if isinstance(data, OnDisk):
        return data.blob_id
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def sha256_of(data):
    return data.sha256 if isinstance(data, OnDisk) else hashlib.sha256(data).hexdigest()


def size_of(data):
    return data.size if isinstance(data, OnDisk) else len(data)


def commit_id(files, parent=""):
    h = hashlib.sha1(parent.encode())
    for path in sorted(files):
        h.update(path.encode() + b"\0" + git_blob_id(files[path]).encode())
    return h.hexdigest()


class Repo:
    def __init__(self, repo_id, files, private=False, gated=False, tokens=()):
        self.id = repo_id
        self.private, self.gated = private, gated
        self.tokens = set(tokens)      # tokens with access (private: read; gated: accepted terms)
        self.commits = {}              # sha -> {path: bytes}
        self.branches = {}
        self.set_branch("main", files)

    def set_branch(self, branch, files):
        """Commits `files` and points `branch` at it; returns the commit."""
        parent = self.branches.get(branch, "")
        sha = commit_id(files, parent)
        self.commits[sha] = {p: b if isinstance(b, OnDisk) else bytes(b) for p, b in files.items()}
        self.branches[branch] = sha
        return sha

    def resolve(self, rev):
        if rev in self.branches:
            return self.branches[rev]
        if rev in self.commits:
            return rev
        return None


def entry(path, data, lfs):
    e = {"type": "file", "oid": git_blob_id(data), "size": size_of(data), "path": path}
    if lfs:
        e["lfs"] = {"oid": sha256_of(data), "size": size_of(data), "pointerSize": 134}
    return e


class HubServer:
    def __init__(self):
        self.repos = {}
        self.requests = []
        self.lock = threading.Lock()
        self.corrupt = False
        self.drop_after = None
        self.drop_times = 0
        self.cut_at = None
        self.flip_once = None
        self.flip_mask = 0xFF
        self.whole_on_resume = False
        # Which files are stored in LFS: the suffixes of the Hub's default
        # .gitattributes, the paths in `lfs_paths`, and with `lfs_over` set
        # every file larger than that many bytes (the Hub's rule for what
        # a plain git push may hold: a DCP's large .metadata is in LFS).
        self.lfs_paths = set()
        self.lfs_over = None
        self.throttle = None
        self.finished = {}
        self.written = 0
        Handler = handler(self._handle)
        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        # The CDN is another host (as the Hub's is): clients stop following
        # the Hub's own redirects there, and send it no credentials.
        self.cdn_httpd = _QuietServer(("127.0.0.2", 0), Handler)
        self.cdn_httpd.daemon_threads = True
        self.cdn = f"http://127.0.0.2:{self.cdn_httpd.server_address[1]}"
        for server in (self.httpd, self.cdn_httpd):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def is_lfs(self, path, data):
        return (path.endswith(LFS_SUFFIXES) or path in self.lfs_paths
                or self.lfs_over is not None and size_of(data) > self.lfs_over)

    def add(self, repo_id, files, **kw):
        self.repos[repo_id] = Repo(repo_id, files, **kw)
        return self.repos[repo_id]

    def clear_log(self):
        with self.lock:
            self.requests.clear()

    def sent(self, prefix=""):
        """Body bytes sent for requests whose path starts with `prefix`."""
        with self.lock:
            return sum(r[4] for r in self.requests if r[1].startswith(prefix))

    def close(self):
        for server in (self.httpd, self.cdn_httpd):
            server.shutdown()
            server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- answers ---------------------------------------------------------------

    def _record(self, h, head, status, sent):
        with self.lock:
            self.requests.append(("HEAD" if head else "GET", h.path, h.headers.get("Range"), status, sent,
                                  h.headers.get("Authorization")))

    def _reply(self, h, head, status, body=b"", headers=()):
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        self._record(h, head, status, 0 if head else len(body))  # before the client can hear the answer
        h.end_headers()
        if not head:
            with contextlib.suppress(OSError):
                h.wfile.write(body)
                self._wrote(len(body))

    def _wrote(self, n):
        with self.lock:
            self.written += n

    def _error(self, h, head, status, code, message):
        body = json.dumps({"error": message}).encode()
        self._reply(h, head, status, body, [("Content-Type", "application/json"), ("X-Error-Code", code),
                                             ("X-Error-Message", message)])

    def _json(self, h, head, obj, headers=()):
        self._reply(h, head, 200, json.dumps(obj).encode(), [("Content-Type", "application/json"), *headers])

    def _access(self, h, head, repo, repo_id):
        """False (and the Hub's refusal sent) when the request may not see the repo."""
        auth = h.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else None
        if repo is None or (repo.private and token not in repo.tokens):
            self._error(h, head, 401, "RepoNotFound", "Repository not found")
            return False
        if repo.gated and token is None:
            self._error(h, head, 401, "GatedRepo",
                        f"Access to model {repo_id} is restricted. You must have access to it and be authenticated "
                        "to access it. Please log in.")
            return False
        if repo.gated and token not in repo.tokens:
            self._error(h, head, 403, "GatedRepo",
                        f"Access to model {repo_id} is restricted and you are not in the authorized list. "
                        f"Visit {self.endpoint}/{repo_id} to ask for access.")
            return False
        return True

    def _find_repo(self, parts):
        """(repo_id, repo, rest) for the longest known repo id of 1 or 2 parts."""
        for n in (2, 1):
            rid = "/".join(parts[:n])
            if rid in self.repos:
                return rid, self.repos[rid], parts[n:]
        return "/".join(parts[:2]), None, parts[2:]

    def _handle(self, h, head):
        url = urllib.parse.urlsplit(h.path)
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
        query = urllib.parse.parse_qs(url.query)
        if h.server is self.cdn_httpd:
            if parts[0] == "cdn" and len(parts) == 2:
                return self._cdn(h, head, parts[1])
            return self._reply(h, head, 404, b"NoSuchKey")
        if parts[:2] == ["api", "models"]:
            rid, repo, rest = self._find_repo(parts[2:])
            if not self._access(h, head, repo, rid):
                return
            return self._api(h, head, repo, rest, query)
        rid, repo, rest = self._find_repo(parts)
        if len(rest) >= 3 and rest[0] == "resolve":
            if not self._access(h, head, repo, rid):
                return
            return self._resolve(h, head, repo, rest[1], "/".join(rest[2:]))
        self._reply(h, head, 404, b"Not Found")

    def _api(self, h, head, repo, rest, query):
        rev = "main"
        if rest[:1] in (["revision"], ["tree"]) and len(rest) >= 2:
            rev = rest[1]
        sha = repo.resolve(rev)
        if sha is None:
            return self._error(h, head, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
        files = repo.commits[sha]
        if rest[:1] == ["tree"]:
            prefix = "/".join(rest[2:])
            recursive = query.get("recursive", ["false"])[0].lower() in ("true", "1")
            out, dirs = [], set()
            for path in sorted(files):
                if prefix and not path.startswith(prefix + "/"):
                    continue
                rel = path[len(prefix) + 1:] if prefix else path
                if "/" in rel and not recursive:
                    d = (prefix + "/" if prefix else "") + rel.split("/")[0]
                    if d not in dirs:
                        dirs.add(d)
                        out.append({"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0,
                                    "path": d})
                    continue
                out.append(entry(path, files[path], self.is_lfs(path, files[path])))
            return self._json(h, head, out)
        siblings = []
        for path in sorted(files):
            e = entry(path, files[path], self.is_lfs(path, files[path]))
            s = {"rfilename": path, "size": e["size"], "blobId": e["oid"]}
            if "lfs" in e:
                s["lfs"] = {"sha256": e["lfs"]["oid"], "size": e["size"], "pointerSize": 134}
            siblings.append(s)
        info = {"_id": repo.id, "id": repo.id, "modelId": repo.id, "sha": sha, "private": repo.private,
                "gated": "auto" if repo.gated else False, "disabled": False, "siblings": siblings, "tags": [],
                "downloads": 0, "likes": 0}
        self._json(h, head, info)

    def _resolve(self, h, head, repo, rev, path):
        sha = repo.resolve(rev)
        if sha is None:
            return self._error(h, head, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
        data = repo.commits[sha].get(path)
        if data is None:
            return self._error(h, head, 404, "EntryNotFound", f"{path} does not exist on \"{rev}\"")
        common = [("X-Repo-Commit", sha), ("Accept-Ranges", "bytes")]
        if self.is_lfs(path, data):
            digest = sha256_of(data)
            return self._reply(h, head, 302, b"Found. Redirecting",
                               [*common, ("Location", f"{self.cdn}/cdn/{digest}"),
                                ("X-Linked-Etag", f'"{digest}"'), ("X-Linked-Size", str(size_of(data))),
                                ("ETag", f'"{digest}"')])
        self._ranged(h, head, data, f'"{git_blob_id(data)}"', common)

    def _cdn(self, h, head, digest):
        data = next((b for r in list(self.repos.values()) for c in list(r.commits.values()) for p, b in c.items()
                     if self.is_lfs(p, b) and sha256_of(b) == digest), None)
        if data is None:
            return self._reply(h, head, 404, b"NoSuchKey")
        if self.corrupt:
            assert not isinstance(data, OnDisk), "corrupt: only for files held in memory"
            data = data[:-1] + bytes([data[-1] ^ 0xFF])  # in the last tensor's bytes, not the header
        self._ranged(h, head, data, f'"{digest}"', [])

    def _ranged(self, h, head, data, etag, headers):
        rng, if_range = h.headers.get("Range"), h.headers.get("If-Range")
        size = size_of(data)
        start, end, status = 0, size, 200
        resumed = bool(rng) and not rng.startswith("bytes=0-")
        if rng and (if_range is None or if_range == etag) and not (resumed and self.whole_on_resume and not headers):
            a, _, z = rng.split("=", 1)[1].partition("-")
            start = int(a)
            end = min(int(z) + 1, size) if z else size
            if start >= size:
                return self._reply(h, head, 416, b"", [("Content-Range", f"bytes */{size}")])
            status = 206
        drop = None
        with self.lock:
            if not head and self.drop_after is not None and self.drop_times > 0 and end - start > self.drop_after:
                self.drop_times -= 1
                drop = self.drop_after
            if not head and not headers and self.cut_at is not None and end > self.cut_at:
                drop = max(0, self.cut_at - start)
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        h.send_header("ETag", etag)
        h.send_header("Accept-Ranges", "bytes")
        if status == 206:
            h.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        h.send_header("Content-Length", str(end - start))
        count = 0 if head else end - start
        with self.lock:
            if not head and not headers and self.flip_once is not None and start <= self.flip_once < end:
                assert not isinstance(data, OnDisk), "flip_once: only for files held in memory"
                at = self.flip_once
                data = data[:at] + bytes([data[at] ^ self.flip_mask]) + data[at + 1:]
                self.flip_once = None
        if drop is not None:
            count = min(count, drop)
        self._record(h, head, status, count)  # before the client can hear the answer
        h.end_headers()
        with contextlib.suppress(OSError), (open(data.path, "rb") if isinstance(data, OnDisk)
                                            else contextlib.nullcontext()) as f:
            step, pause = self.throttle if self.throttle and not headers else (count or 1, 0)
            for at in range(0, count, step):
                time.sleep(pause if at else 0)
                n = min(step, count - at)
                if f is None:
                    h.wfile.write(data[start + at:start + at + n])
                    h.wfile.flush()
                else:  # from the file to the socket in the kernel: no copy of the file in this process
                    n = h.connection.sendfile(f, start + at, n)
                self._wrote(n)
            if drop is None and end == size and not head:
                with self.lock:
                    self.finished[h.path] = time.monotonic()
        if drop is not None:
            h.close_connection = True
            with contextlib.suppress(OSError):
                h.connection.shutdown(socket.SHUT_RDWR)
