"""A URL's user part never shows: a bare token (http://TOKEN@host/…, which
libcurl sends as a user name) and user:TOKEN@ alike, over nginx on
loopback, for a successful open and for failures (404, 401, a refused
connection).  Every channel is searched for the token: the CLI's stdout
and stderr (listings, --json, progress lines, usage errors), Python's
reprs, attributes and exceptions, and the cache directory's file names and
contents."""
import os

import pytest
from conftest import run
from servers import free_port

import ckpt

TOKEN = "ghp_S3cr3tT0k3nXYZ"


def leaks(text):
    return TOKEN in text or TOKEN.lower() in text.lower()


def forms(host, path):
    return [f"http://{TOKEN}@{host}/{path}", f"http://alice:{TOKEN}@{host}/{path}"]


def cache_text(cache):
    """Every name under `cache`, and every file's bytes."""
    out = []
    for d, dirs, files in os.walk(cache):
        out += dirs + files
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                out.append(fh.read().decode("latin-1"))
    return "\n".join(out)


def cli_outputs(url, tmp_path):
    """What the commands print for `url`: (return code, stdout + stderr) each."""
    cache = tmp_path / "cache"
    opts = ("--cache-dir", cache, "--retries", "1")  # one retry: the path that says "after 1 retry"
    runs = [
        run("inspect", url, *opts),
        run("inspect", "--json", url, *opts),
        run("verify", url, *opts),
        run("convert", url, tmp_path / "out.safetensors", "--force", "--progress", *opts),
        run("convert", url, tmp_path / "dry.safetensors", "--dry-run", "--json", *opts),
        run("diff", url, url, *opts),
        run("inspect", url, url),  # a usage error that echoes its arguments
        run("convert", url, tmp_path / "x.safetensors", url),
    ]
    return [(r.returncode, r.stdout + r.stderr) for r in runs], cache_text(cache) if cache.exists() else ""


def python_outputs(url, tmp_path, capfd):
    """What Python shows of `url`: reprs, attributes, exceptions, progress."""
    shown = []
    cache = tmp_path / "pycache"
    try:
        with ckpt.open(url, cache_dir=cache, retries=1) as c:
            shown += [repr(c), str(c), c.path, repr(c.files), repr(c.tensors)]
            try:
                c.spec("no.such.tensor")
            except KeyError as e:
                shown += [str(e), repr(e)]
        ckpt.load(url, cache_dir=cache, retries=1, progress=True)
    except ckpt.Error as e:
        shown += [str(e), repr(e), repr(e.args), str(e.path), str(getattr(e, "filename", ""))]
    out, err = capfd.readouterr()
    shown += [out, err]
    if cache.exists():
        shown.append(cache_text(cache))
    return "\n".join(shown)


def test_token_never_shown_on_success(nginx, served, tmp_path, capfd):
    host = nginx.base.replace("http://", "")
    for url in forms(host, "model.safetensors"):
        results, cached = cli_outputs(url, tmp_path)
        assert [rc for rc, _ in results[:6]] == [0, 0, 0, 0, 0, 0], results
        assert [rc for rc, _ in results[6:]] == [2, 2]
        for _, text in results:
            assert not leaks(text), text
        assert "REDACTED@" in results[0][1] and "REDACTED@" in results[6][1]
        assert cached and not leaks(cached)  # a copy and its stamp, named without the token
        text = python_outputs(url, tmp_path, capfd)
        assert "REDACTED@" in text and not leaks(text), text
    # The token still went to the server (as the user name of basic auth).
    assert any(row[5].startswith("Basic ") for row in nginx.log())


@pytest.mark.parametrize("failure", ["404", "401", "refused"])
def test_token_never_shown_on_failure(nginx, served, tmp_path, capfd, failure):
    host = nginx.base.replace("http://", "")
    path = {"404": "nope.safetensors", "401": "basic/model.safetensors", "refused": "model.safetensors"}[failure]
    if failure == "refused":
        host = f"127.0.0.1:{free_port()}"
    for url in forms(host, path):
        results, cached = cli_outputs(url, tmp_path)
        codes = [rc for rc, _ in results]
        assert codes[:6] == [1] * 5 + [2] and codes[6:] == [2, 2], results  # diff's trouble is 2
        want = {"404": "[CKPT_E_NOT_FOUND]", "401": "[CKPT_E_AUTH/CKPT_D_HTTP_AUTH]", "refused": "[CKPT_E_NETWORK/CKPT_D_NETWORK]"}[failure]
        assert want in results[0][1]
        for _, text in results:
            assert not leaks(text), text
        assert not leaks(cached)
        text = python_outputs(url, tmp_path, capfd)
        assert want.strip("[]") in text and not leaks(text), text


def test_redact_name():
    """One redaction, the library's, for the CLI and Python alike."""
    from ckpt import _ckpt, _sources
    for url, want in [(f"http://{TOKEN}@h/x", "http://REDACTED@h/x"),
                      (f"https://u:{TOKEN}@h:1/a?token={TOKEN}&v=1", "https://REDACTED@h:1/a?token=REDACTED&v=1"),
                      ("/local/model.safetensors", "/local/model.safetensors")]:
        assert _ckpt.redact_name(url) == want and _sources.shown(url) == want
