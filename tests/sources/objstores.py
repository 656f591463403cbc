"""Google Cloud Storage and Azure Blob Storage for the tests, on loopback,
checking credentials as the services do (no emulator on PyPI checks them:
gcp-storage-emulator and Azurite accept any signature).

GcsServer — the XML API (https://storage.googleapis.com/BUCKET/KEY):
- GET/HEAD /BUCKET/KEY: byte ranges (206, Content-Range), ETag, If-Match
  (412 PreconditionFailed);
- GET /BUCKET?prefix=&delimiter=/&marker=: ListBucketResult, `page` keys a
  page, <NextMarker> while truncated;
- V4 signatures recomputed from the request as Google documents them
  (GOOG4-HMAC-SHA256 with x-goog-*, "goog4_request" scopes and the
  service "storage", or AWS4-HMAC-SHA256 in interoperability mode): the
  canonical request (verb, encoded path, sorted query, the signed headers,
  the payload hash of x-goog-content-sha256 or UNSIGNED-PAYLOAD), the
  signing key derived from the secret, the date within 15 minutes;
  403 SignatureDoesNotMatch / InvalidAccessKeyId with the service's bodies;
- OAuth bearer tokens the token endpoint or the metadata server issued,
  until they expire (each issuer's `lifetime`, seconds); 401
  AuthenticationRequired for one it did not issue, or that expired;
- private buckets: anonymous callers get 403 AccessDenied; missing objects
  404 NoSuchKey, missing buckets 404 NoSuchBucket.
TokenServer — a service account's token_uri: POST
  grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer with the
  assertion's RS256 signature verified with the account's public key, its
  iss, aud, scope, iat and exp checked (400 invalid_grant otherwise), and
  grant_type=refresh_token for an authorized user.
MetadataServer — GET /computeMetadata/v1/instance/service-accounts/default/token
  with Metadata-Flavor: Google (403 without).
AzureServer — Blob Storage, path-style as Azurite addresses it
  (http://127.0.0.1:PORT/ACCOUNT/CONTAINER/BLOB):
- GET/HEAD blobs with Range or x-ms-range (206), ETag, If-Match (412
  ConditionNotMet); GET ?restype=container&comp=list&prefix=&delimiter=/
  &marker=: EnumerationResults, `page` blobs a page, <NextMarker>;
- SharedKey recomputed from the request (the string-to-sign of the
  2009-09-19+ versions: verb, the standard headers, the x-ms-* headers,
  the canonicalized resource "/ACCOUNT/ACCOUNT/CONTAINER/BLOB" and query),
  x-ms-date within 15 minutes; 403 AuthenticationFailed with
  AuthenticationErrorDetail;
- service SAS tokens (sv 2020-12-06 and later: sp, st, se, resource, si,
  sip, spr, sv, sr, snapshot time, encryption scope, rscc…rsct) checked
  for signature, time window ("Signature not valid in the specified time
  frame"), permissions and resource;
- private containers: anonymous callers get 404 ResourceNotFound, as Azure
  answers them; 404 BlobNotFound, ContainerNotFound.
Spy — any request, recorded (where a redirect would lead).

Each server logs `.requests`: (method, path with query, Range, status,
bytes of body sent, Authorization header)."""
import base64
import datetime
import email.utils
import hashlib
import hmac
import http.server
import json
import secrets
import threading
import time
import urllib.parse
from xml.sax.saxutils import escape

from servers import _QuietServer

SKEW = 15 * 60


def _hmac(key, msg):
    return hmac.new(key, msg.encode() if isinstance(msg, str) else msg, hashlib.sha256).digest()


class _Server:
    """A ThreadingHTTPServer on 127.0.0.1 calling self.serve(handler, method)."""

    def __init__(self, host="127.0.0.1", port=0):
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                owner._dispatch(self, "GET")

            def do_HEAD(self):
                owner._dispatch(self, "HEAD")

            def do_POST(self):
                owner._dispatch(self, "POST")

        self.requests = []
        self.lock = threading.Lock()
        self.httpd = _QuietServer((host, port), Handler)
        self.host = f"{host}:{self.httpd.server_address[1]}"
        self.url = f"http://{self.host}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _dispatch(self, h, method):
        self.serve(h, method)

    def reply(self, h, method, status, body=b"", headers=()):
        # Logged before the client can have the answer, so that a test
        # sees every request its call made.
        sent = len(body) if method != "HEAD" else 0
        with self.lock:
            self.requests.append((method, h.path, h.headers.get("Range") or h.headers.get("x-ms-range"),
                                  status, sent, h.headers.get("Authorization")))
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if sent:
            h.wfile.write(body)

    def serve_object(self, h, method, data, etag, precondition_code):
        """A blob or object: single byte ranges, ETag, If-Match."""
        match = h.headers.get("If-Match")
        if match and match != etag:
            return self.reply(h, method, 412, self.error(precondition_code, "The condition specified using HTTP "
                                                          "conditional header(s) is not met."),
                              [("Content-Type", "application/xml")])
        rng = h.headers.get("Range") or h.headers.get("x-ms-range")
        headers = [("ETag", etag), ("Accept-Ranges", "bytes"), ("Content-Type", "application/octet-stream")]
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            a = int(a)
            b = min(int(b) if b else len(data) - 1, len(data) - 1)
            if a >= len(data):
                return self.reply(h, method, 416, b"", headers + [("Content-Range", f"bytes */{len(data)}")])
            return self.reply(h, method, 206, data[a:b + 1],
                              headers + [("Content-Range", f"bytes {a}-{b}/{len(data)}")])
        return self.reply(h, method, 200, data, headers)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _xml_error(code, message, **extra):
    more = "".join(f"<{k}>{escape(v)}</{k}>" for k, v in extra.items())
    return (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
            f"<Message>{escape(message)}</Message>{more}</Error>").encode()


def _listing(names, prefix, delimiter, after):
    """The names of a listing's page past `after`: the objects directly
    under `prefix`, and the "subdirectories" (prefixes ending in the
    delimiter) below it."""
    objects, prefixes = [], set()
    for k in sorted(names):
        if not k.startswith(prefix) or k <= after:
            continue
        rest = k[len(prefix):]
        if delimiter and delimiter in rest:
            prefixes.add(prefix + rest.split(delimiter)[0] + delimiter)
        else:
            objects.append(k)
    return objects, prefixes


def _etag(data):
    return '"' + hashlib.md5(data).hexdigest() + '"'


# ---- Google Cloud Storage -------------------------------------------------------------


class GcsServer(_Server):
    def __init__(self, page=2):
        super().__init__()
        self.buckets = {}          # name -> {key: bytes}
        self.public = set()        # buckets anonymous callers may read
        self.hmac_keys = {}        # access id -> secret
        self.tokens = {}           # bearer tokens issued (TokenServer, MetadataServer) -> when they expire
        self.redirects = {}        # (bucket, key) -> URL answered with 307
        self.page = page

    error = staticmethod(_xml_error)

    def _sig_error(self, h, method, code, message, **extra):
        return self.reply(h, method, 403, _xml_error(code, message, **extra), [("Content-Type", "application/xml")])

    def _check_v4(self, h, method, auth):
        """None when the V4 signature is right, else the error sent."""
        algorithm, _, rest = auth.partition(" ")
        goog = algorithm == "GOOG4-HMAC-SHA256"
        if algorithm not in ("GOOG4-HMAC-SHA256", "AWS4-HMAC-SHA256"):
            return self._sig_error(h, method, "InvalidArgument", "Invalid argument.")
        fields = dict(p.strip().split("=", 1) for p in rest.split(","))
        access_id, date, region, service, request = fields["Credential"].split("/")
        if request != ("goog4_request" if goog else "aws4_request"):
            return self._sig_error(h, method, "InvalidArgument", "Invalid credential scope.")
        secret = self.hmac_keys.get(access_id)
        if secret is None:
            return self._sig_error(h, method, "InvalidAccessKeyId", "The Google Cloud Storage HMAC access key ID "
                                   "you provided does not exist in our records.")
        prefix = "x-goog-" if goog else "x-amz-"
        stamp = h.headers.get(prefix + "date", "")
        try:
            when = datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            return self._sig_error(h, method, "MissingSecurityHeader", f"Your request has no {prefix}date header.")
        if abs(time.time() - when.timestamp()) > SKEW or stamp[:8] != date:
            return self._sig_error(h, method, "RequestTimeTooSkewed", "The difference between the request time "
                                   "and the current time is too large.")
        signed = fields["SignedHeaders"].split(";")
        if "host" not in signed:
            return self._sig_error(h, method, "SignatureDoesNotMatch", "host must be signed.")
        path, _, query = h.path.partition("?")
        pairs = sorted(urllib.parse.parse_qsl(query, keep_blank_values=True))
        canonical_query = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
                                   for k, v in pairs)
        canonical_headers = "".join(f"{k}:{' '.join((h.headers.get(k) or '').split())}\n" for k in signed)
        payload = h.headers.get(prefix + "content-sha256") or "UNSIGNED-PAYLOAD"
        canonical = "\n".join([method, path, canonical_query, canonical_headers, ";".join(signed), payload])
        scope = f"{date}/{region}/{service}/{request}"
        to_sign = "\n".join([algorithm, stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        key = (("GOOG4" if goog else "AWS4") + secret).encode()
        for part in (date, region, service, request):
            key = _hmac(key, part)
        expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, fields["Signature"]):
            return self._sig_error(h, method, "SignatureDoesNotMatch", "The request signature we calculated does "
                                   "not match the signature you provided. Check your Google secret key and signing "
                                   "method.", StringToSign=to_sign, CanonicalRequest=canonical)
        return None

    def serve(self, h, method):
        auth = h.headers.get("Authorization")
        if auth and auth.startswith("Bearer "):
            if time.time() >= self.tokens.get(auth[7:], 0):
                details = "Invalid Credentials" if auth[7:] in self.tokens else "Unknown token"
                return self.reply(h, method, 401, _xml_error("AuthenticationRequired", "Authentication required.",
                                                             Details=details),
                                  [("Content-Type", "application/xml")])
        elif auth and self._check_v4(h, method, auth) is not None:
            return
        path, _, query = h.path.partition("?")
        bucket, _, key = urllib.parse.unquote(path[1:]).partition("/")
        if bucket not in self.buckets:
            return self.reply(h, method, 404, _xml_error("NoSuchBucket", "The specified bucket does not exist."),
                              [("Content-Type", "application/xml")])
        if not auth and bucket not in self.public:
            what = "storage.objects.list" if not key else "storage.objects.get"
            return self.reply(h, method, 403, _xml_error(
                "AccessDenied", "Access denied.", Details=f"Anonymous caller does not have {what} access to the "
                f"Google Cloud Storage object. Permission '{what}' denied on resource (or it may not exist)."),
                [("Content-Type", "application/xml")])
        if (bucket, key) in self.redirects:
            return self.reply(h, method, 307, b"", [("Location", self.redirects[bucket, key])])
        objects = self.buckets[bucket]
        if not key:
            return self._list(h, method, objects, dict(urllib.parse.parse_qsl(query, keep_blank_values=True)))
        if key not in objects:
            return self.reply(h, method, 404, _xml_error("NoSuchKey", "The specified key does not exist."),
                              [("Content-Type", "application/xml")])
        data = objects[key]
        return self.serve_object(h, method, data, _etag(data), "PreconditionFailed")

    def _list(self, h, method, objects, q):
        prefix, delimiter, marker = q.get("prefix", ""), q.get("delimiter", ""), q.get("marker", "")
        keys, prefixes = _listing(objects, prefix, delimiter, marker)
        page, more = keys[:self.page], len(keys) > self.page
        body = ["<?xml version='1.0' encoding='UTF-8'?><ListBucketResult xmlns='http://doc.s3.amazonaws.com/2006-03-01'>",
                f"<Name>b</Name><Prefix>{escape(prefix)}</Prefix><Marker>{escape(marker)}</Marker>",
                f"<IsTruncated>{'true' if more else 'false'}</IsTruncated>"]
        if more:
            body.append(f"<NextMarker>{escape(page[-1])}</NextMarker>")
        for k in page:
            body.append(f"<Contents><Key>{escape(k)}</Key><Size>{len(objects[k])}</Size>"
                        f"<ETag>{_etag(objects[k])}</ETag></Contents>")
        for p in sorted(prefixes):
            body.append(f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>")
        body.append("</ListBucketResult>")
        return self.reply(h, method, 200, "".join(body).encode(), [("Content-Type", "application/xml")])


def _b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class TokenServer(_Server):
    """A token_uri: JWT bearer assertions of the service accounts in
    `accounts` (client_email -> public key), and refresh tokens in
    `refresh` (refresh_token -> (client_id, client_secret))."""

    def __init__(self, gcs):
        super().__init__()
        self.gcs = gcs
        self.accounts = {}
        self.refresh = {}
        self.token_uri = self.url + "/token"
        self.issued = 0
        self.lifetime = 3599

    def _deny(self, h, description):
        body = json.dumps({"error": "invalid_grant", "error_description": description}).encode()
        return self.reply(h, "POST", 400, body, [("Content-Type", "application/json")])

    def _grant(self, h):
        token = "ya29." + secrets.token_urlsafe(24)
        self.gcs.tokens[token] = time.time() + self.lifetime
        self.issued += 1
        body = json.dumps({"access_token": token, "expires_in": self.lifetime, "token_type": "Bearer"}).encode()
        return self.reply(h, "POST", 200, body, [("Content-Type", "application/json")])

    def serve(self, h, method):
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        if method != "POST" or h.path != "/token":
            return self.reply(h, method, 404, b"")
        n = int(h.headers.get("Content-Length", "0"))
        form = dict(urllib.parse.parse_qsl(h.rfile.read(n).decode()))
        if h.headers.get("Content-Type", "").split(";")[0] != "application/x-www-form-urlencoded":
            return self._deny(h, "Bad content type.")
        if form.get("grant_type") == "refresh_token":
            client = self.refresh.get(form.get("refresh_token"))
            if client != (form.get("client_id"), form.get("client_secret")):
                return self._deny(h, "Bad Request")
            return self._grant(h)
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return self._deny(h, "Invalid grant type.")
        try:
            head64, claims64, sig64 = form["assertion"].split(".")
            head, claims = json.loads(_b64url_decode(head64)), json.loads(_b64url_decode(claims64))
        except (KeyError, ValueError):
            return self._deny(h, "Invalid JWT.")
        key = self.accounts.get(claims.get("iss"))
        if head.get("alg") != "RS256" or key is None:
            return self._deny(h, "Invalid JWT: unknown issuer or algorithm.")
        try:
            key.verify(_b64url_decode(sig64), f"{head64}.{claims64}".encode(), padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            return self._deny(h, "Invalid JWT Signature.")
        now = time.time()
        if claims.get("aud") != self.token_uri:
            return self._deny(h, "Invalid JWT: audience.")
        if "devstorage" not in claims.get("scope", ""):
            return self._deny(h, "Invalid JWT: scope.")
        if not (claims["iat"] - 300 <= now <= claims["exp"]) or claims["exp"] - claims["iat"] > 3600:
            return self._deny(h, "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable "
                                 "timeframe. Check your iat and exp values in the JWT claim.")
        return self._grant(h)


class MetadataServer(_Server):
    def __init__(self, gcs):
        super().__init__()
        self.gcs = gcs

    def serve(self, h, method):
        if h.path != "/computeMetadata/v1/instance/service-accounts/default/token":
            return self.reply(h, method, 404, b"Not Found")
        if h.headers.get("Metadata-Flavor") != "Google":
            return self.reply(h, method, 403, b"Missing required header: Metadata-Flavor")
        token = "ya29.m-" + secrets.token_urlsafe(24)
        self.gcs.tokens[token] = time.time() + 3599
        body = json.dumps({"access_token": token, "expires_in": 3599, "token_type": "Bearer"}).encode()
        return self.reply(h, method, 200, body, [("Content-Type", "application/json"), ("Metadata-Flavor", "Google")])


def service_account(token_uri, email="loader@ckpt-tests.iam.gserviceaccount.com"):
    """A service account's key file (dict) and its public key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    info = {"type": "service_account", "project_id": "ckpt-tests", "private_key_id": secrets.token_hex(20),
            "private_key": pem, "client_email": email, "client_id": "1234567890",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": token_uri}
    return info, key.public_key()


# ---- Azure Blob Storage ----------------------------------------------------------------

SAS_VERSION = "2022-11-02"


def _sas_resource(account, container, blob=None):
    return f"/blob/{account}/{container}" + (f"/{blob}" if blob else "")


def make_sas(account, key, container, blob=None, permissions="rl", expiry=None, start=None, version=SAS_VERSION):
    """A service SAS token (the query string, without '?') as azure-storage-blob
    generates one: sp, st, se, sv, sr, sig."""
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    now = datetime.datetime.now(datetime.timezone.utc)
    se = (expiry or now + datetime.timedelta(hours=1)).strftime(fmt)
    st = (start or now - datetime.timedelta(minutes=5)).strftime(fmt)
    sr = "b" if blob else "c"
    fields = [permissions, st, se, _sas_resource(account, container, blob), "", "", "https,http", version, sr,
              "", "", "", "", "", "", ""]
    sig = base64.b64encode(_hmac(base64.b64decode(key), "\n".join(fields))).decode()
    q = {"sp": permissions, "st": st, "se": se, "spr": "https,http", "sv": version, "sr": sr, "sig": sig}
    return urllib.parse.urlencode(q)


class AzureServer(_Server):
    """Accounts (name -> key) with containers (name -> {blob: bytes})."""

    def __init__(self, page=2, port=0):
        super().__init__(port=port)
        self.keys = {}
        self.containers = {}       # (account, container) -> {blob: bytes}
        self.public = set()        # (account, container) anonymous callers may read
        self.redirects = {}        # (account, container, blob) -> URL answered with 307
        self.page = page

    @staticmethod
    def error(code, message, **extra):
        return _xml_error(code, message + "\nRequestId:00000000-0000-0000-0000-000000000000\nTime:"
                          + datetime.datetime.now(datetime.timezone.utc).isoformat(), **extra)

    def _fail(self, h, method, status, code, message, **extra):
        return self.reply(h, method, status, self.error(code, message, **extra),
                          [("Content-Type", "application/xml"), ("x-ms-error-code", code)])

    def _denied(self, h, method, detail):
        return self._fail(h, method, 403, "AuthenticationFailed", "Server failed to authenticate the request. "
                          "Make sure the value of Authorization header is formed correctly including the signature.",
                          AuthenticationErrorDetail=detail)

    def _check_shared_key(self, h, method, account, auth):
        scheme, _, cred = auth.partition(" ")
        name, _, signature = cred.partition(":")
        if scheme != "SharedKey" or name != account or account not in self.keys:
            return self._denied(h, method, f"The account {name} in the Authorization header is not the one "
                                "addressed, or has no key.")
        if not h.headers.get("x-ms-version"):
            return self._fail(h, method, 400, "MissingRequiredHeader", "An HTTP header that's mandatory for this "
                              "request is not specified.", HeaderName="x-ms-version")
        stamp = h.headers.get("x-ms-date") or h.headers.get("Date")
        try:
            when = email.utils.parsedate_to_datetime(stamp).timestamp()
        except (TypeError, ValueError):
            return self._denied(h, method, "x-ms-date is missing or not an RFC 1123 date.")
        if abs(time.time() - when) > SKEW:
            return self._denied(h, method, f"Request date header too old: '{stamp}'")
        std = ["Content-Encoding", "Content-Language", "Content-Length", "Content-MD5", "Content-Type", "Date",
               "If-Modified-Since", "If-Match", "If-None-Match", "If-Unmodified-Since", "Range"]
        values = [h.headers.get(k, "") for k in std]
        if values[2] == "0":
            values[2] = ""
        ms = sorted((k.lower(), " ".join(v.split())) for k, v in h.headers.items() if k.lower().startswith("x-ms-"))
        path, _, query = h.path.partition("?")
        resource = f"/{account}{path}"
        for k, v in sorted((k.lower(), v) for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True)):
            resource += f"\n{k}:{v}"
        to_sign = "\n".join([method] + values) + "\n" + "".join(f"{k}:{v}\n" for k, v in ms) + resource
        expected = base64.b64encode(_hmac(base64.b64decode(self.keys[account]), to_sign)).decode()
        if not hmac.compare_digest(expected, signature):
            return self._denied(h, method, f"The MAC signature found in the HTTP request '{signature}' is not the same "
                                f"as any computed signature. Server used following string to sign: '{to_sign}'.")
        return None

    def _check_sas(self, h, method, account, container, blob, q, listing):
        if account not in self.keys:
            return self._denied(h, method, "Unknown account.")
        sv, sr = q.get("sv", ""), q.get("sr", "")
        resource = _sas_resource(account, container, blob if sr == "b" else None)
        fields = [q.get("sp", ""), q.get("st", ""), q.get("se", ""), resource, q.get("si", ""), q.get("sip", ""),
                  q.get("spr", ""), sv, sr, q.get("sst", ""), q.get("ses", ""), q.get("rscc", ""),
                  q.get("rscd", ""), q.get("rsce", ""), q.get("rscl", ""), q.get("rsct", "")]
        to_sign = "\n".join(fields)
        expected = base64.b64encode(_hmac(base64.b64decode(self.keys[account]), to_sign)).decode()
        if sr not in ("b", "c") or not hmac.compare_digest(expected, q.get("sig", "")):
            return self._denied(h, method, f"Signature fields not well formed or signature did not match. Server "
                                f"used following string to sign: '{to_sign}'.")
        fmt = "%Y-%m-%dT%H:%M:%SZ"
        now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        start = datetime.datetime.strptime(q["st"], fmt).replace(tzinfo=datetime.timezone.utc) if q.get("st") else None
        expiry = datetime.datetime.strptime(q["se"], fmt).replace(tzinfo=datetime.timezone.utc)
        if now > expiry or (start and now < start):
            return self._denied(h, method, f"Signature not valid in the specified time frame: Start "
                                f"[{email.utils.format_datetime(start, usegmt=True) if start else ''}] - Expiry "
                                f"[{email.utils.format_datetime(expiry, usegmt=True)}] - Current "
                                f"[{email.utils.format_datetime(now, usegmt=True)}]")
        need = "l" if listing else "r"
        if need not in q.get("sp", "") or (listing and sr != "c"):
            return self._fail(h, method, 403, "AuthorizationPermissionMismatch", "This request is not authorized "
                              "to perform this operation using this permission.")
        return None

    def serve(self, h, method):
        path, _, query = h.path.partition("?")
        q = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        parts = urllib.parse.unquote(path[1:]).split("/", 2)
        account, container, blob = (parts + ["", "", ""])[:3]
        listing = q.get("restype") == "container" and q.get("comp") == "list"
        auth = h.headers.get("Authorization")
        if auth:
            if self._check_shared_key(h, method, account, auth) is not None:
                return
        elif "sig" in q:
            if self._check_sas(h, method, account, container, blob, q, listing) is not None:
                return
        elif (account, container) not in self.public:
            return self._fail(h, method, 404, "ResourceNotFound", "The specified resource does not exist.")
        if (account, container) not in self.containers:
            return self._fail(h, method, 404, "ContainerNotFound", "The specified container does not exist.")
        if (account, container, blob) in self.redirects:
            return self.reply(h, method, 307, b"", [("Location", self.redirects[account, container, blob])])
        blobs = self.containers[account, container]
        if listing:
            return self._list(h, method, blobs, q)
        if blob not in blobs:
            return self._fail(h, method, 404, "BlobNotFound", "The specified blob does not exist.")
        data = blobs[blob]
        return self.serve_object(h, method, data, _etag(data), "ConditionNotMet")

    def _list(self, h, method, blobs, q):
        prefix, delimiter, marker = q.get("prefix", ""), q.get("delimiter", ""), q.get("marker", "")
        after = base64.b64decode(marker).decode() if marker else ""
        names, prefixes = _listing(blobs, prefix, delimiter, after)
        page, more = names[:self.page], len(names) > self.page
        body = [f"<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults ServiceEndpoint=\"{self.url}/\" "
                f"ContainerName=\"c\"><Prefix>{escape(prefix)}</Prefix><Marker>{escape(marker)}</Marker>"
                f"<MaxResults>{self.page}</MaxResults><Delimiter>{escape(delimiter)}</Delimiter><Blobs>"]
        for k in page:
            body.append(f"<Blob><Name>{escape(k)}</Name><Properties><Content-Length>{len(blobs[k])}</Content-Length>"
                        f"<Etag>{_etag(blobs[k])}</Etag><BlobType>BlockBlob</BlobType></Properties></Blob>")
        for p in sorted(prefixes):
            body.append(f"<BlobPrefix><Name>{escape(p)}</Name></BlobPrefix>")
        body.append("</Blobs>")
        body.append(f"<NextMarker>{base64.b64encode(page[-1].encode()).decode()}</NextMarker>" if more
                    else "<NextMarker />")
        body.append("</EnumerationResults>")
        return self.reply(h, method, 200, "".join(body).encode(), [("Content-Type", "application/xml")])


class Spy(_Server):
    """Where a redirect leads: answers 404 to everything, remembering it."""

    def serve(self, h, method):
        return self.reply(h, method, 404, b"")
