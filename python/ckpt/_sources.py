"""Where a checkpoint's bytes come from: local paths, or http://, https://
and s3:// URLs, and how local files are read (direct=True: O_DIRECT,
around the page cache).

Every function that opens a checkpoint takes, as keyword arguments:

    direct=False        read local files with O_DIRECT: nothing goes
                        through the page cache (loads, converts — which
                        also drop what they write — and headers); no mmap
    cache_dir=None      keep verified copies of remote files there (named
                        by URL, ETag and size; a later open reads them
                        locally after one request to check the version);
                        created 0700, its files 0600; a copy is used only
                        if it is this user's regular file, unchanged since
                        written and, where the server gives a SHA-256, of
                        that SHA-256 (see ckpt_catalog_options.cache_dir)
    bearer_token=None   sent as "Authorization: Bearer" to the URL's host
                        (default: $HF_TOKEN for huggingface.co and hf.co)
    timeout=None        seconds without a byte before a transfer fails and
                        is retried (60)
    min_speed=None      bytes per second a transfer must keep up, averaged
                        over min_speed_time, or it fails (CKPT_E_TIMEOUT)
                        and is retried (1024; 0: no minimum)
    min_speed_time=None  seconds of that window (30)
    retry_deadline=None  seconds a request may go without progress before
                        its next failure is final, however many retries are
                        left (300; 0: retries alone bound it)
    connect_timeout=None  seconds to establish a connection (30)
    retries=None        retries of a failed request, each resuming at the
                        last byte received (5)
    max_connections=None  parallel range requests per file (16)
    download_progress=None  a server that serves no byte ranges
                        (`python -m http.server`, many mirrors) is refused
                        for files over 256 KiB unless cache_dir is given:
                        then each such file is downloaded whole into it,
                        once, and read there.  This hears those downloads:
                        None shows a bar on a terminal, True always, False
                        never; a callable(done, total) gets the bytes (a
                        true result, or an exception, stops them:
                        CancelledError)
    hf_cache=None       the Hugging Face Hub's cache that hf:// names use
                        (huggingface_hub's and transformers' cache_dir=;
                        default: $HF_HUB_CACHE, $HF_HOME/hub)

s3:// names use $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY,
$AWS_SESSION_TOKEN, $AWS_REGION and $AWS_ENDPOINT_URL (S3-compatible
stores).  gs://bucket/key names use HMAC keys ($GS_ACCESS_KEY_ID,
$GS_SECRET_ACCESS_KEY), else Application Default Credentials
($GOOGLE_APPLICATION_CREDENTIALS, or the metadata server), and
$STORAGE_EMULATOR_HOST; az://account/container/blob and
https://account.blob.core.windows.net/... names a SAS token (in the URL or
$AZURE_STORAGE_SAS_TOKEN), else $AZURE_STORAGE_ACCOUNT and
$AZURE_STORAGE_KEY, or $AZURE_STORAGE_CONNECTION_STRING.  hf://org/name[@revision][/path] names a repo of the Hugging Face
Hub (or a folder or file of it), read at one commit through
$HF_ENDPOINT, with $HF_TOKEN or the token `hf auth login` saved, and kept
in the Hub's own cache ($HF_HUB_CACHE, $HF_HOME; $HF_HUB_OFFLINE=1 reads
only that): see docs/SOURCES.md."""
import difflib
import inspect
import os

from . import _ckpt, _progress

OPTIONS = ("cache_dir", "bearer_token", "timeout", "connect_timeout", "retries", "max_connections", "min_speed",
           "min_speed_time", "retry_deadline", "download_progress", "hf_cache")
_SCHEMES = ("http://", "https://", "s3://", "gs://", "az://", "hf://")


def is_remote(path):
    """True for an http://, https://, s3://, gs://, az:// or hf:// name."""
    return isinstance(path, str) and path.startswith(_SCHEMES)


def name(path):
    """A path or URL as the library takes it (URLs stay strings)."""
    if isinstance(path, str) and is_remote(path):
        return path
    return os.fspath(path)


def check(options, caller=None):
    """Refuses keywords that are neither source options nor the caller's
    own, naming the closest of those (a typo: on_load= for on_loaded=)."""
    unknown = sorted(set(options) - set(OPTIONS))
    if not unknown:
        return
    known = list(OPTIONS)
    if caller is not None:
        known += [n for n, p in inspect.signature(caller).parameters.items()
                  if n != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    named = []
    for u in unknown:
        close = difflib.get_close_matches(u, known, n=1)
        named.append(f"{u!r} (did you mean {close[0]!r}?)" if close else repr(u))
    raise TypeError(f"unexpected keyword argument{'s' if len(unknown) > 1 else ''} {', '.join(named)}")


def catalog(path, io=0, allowed_globals=None, _caller=None, **options):
    """Opens a _ckpt.Catalog with the source options and `io`, how it reads
    local files (ckpt_io_mode: 0 auto, 1 buffered, 2 direct; `_caller`: the
    public function the options were given to, for its keywords in a typo's
    hint)."""
    check(options, _caller)
    kw = {k: v for k, v in options.items() if v is not None}
    for path_option in ("cache_dir", "hf_cache"):
        if path_option in kw:
            kw[path_option] = os.fspath(kw[path_option])
    kw["download_progress"] = _progress.choose(options.get("download_progress"), "download")
    if io:
        kw["io"] = io
    return _ckpt.Catalog(name(path), allowed_globals, **kw)


def follow_progress(progress, options):
    """A function's progress=True/False goes for its downloads too, unless
    download_progress= says otherwise."""
    if isinstance(progress, bool):
        options.setdefault("download_progress", progress)
    return options


def shown(path):
    """A path or URL as it may be printed: the library's one redaction
    (ckpt_redact_name: no user part, no credentials in the query)."""
    s = path if isinstance(path, str) else os.fsdecode(os.fspath(path))
    return _ckpt.redact_name(s) if is_remote(s) else s
