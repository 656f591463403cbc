"""https:// sources against nginx with TLS on loopback: the server's
certificate is verified (with $CURL_CA_BUNDLE naming a private CA), and a
server the client cannot verify is refused with an error naming the URL."""
import os
import subprocess

import pytest

import ckpt
from conftest import run, same_dict
from servers import Nginx, nginx_available


@pytest.fixture(scope="module")
def https(served, tmp_path_factory):
    if not nginx_available():
        pytest.skip("nginx is not installed (Debian's nginx-light: make deps installs it)")
    root, sd = served
    work = tmp_path_factory.mktemp("tls")
    cert, key = work / "cert.pem", work / "key.pem"
    # A self-signed certificate for 127.0.0.1: its own CA.
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    with Nginx(root, work / "run", ssl=(cert, key)) as n:
        yield n, cert, sd


def test_https_loads_and_converts_with_the_ca_bundle(https, tmp_path, monkeypatch):
    n, cert, sd = https
    assert n.url("model.safetensors").startswith("https://")
    monkeypatch.setenv("CURL_CA_BUNDLE", str(cert))
    assert same_dict(ckpt.load(n.url("model.safetensors")), sd)
    assert same_dict(ckpt.load(n.url("sharded/model.safetensors.index.json")), sd)
    r = run("convert", n.url("model.safetensors"), tmp_path / "out.safetensors", env={"CURL_CA_BUNDLE": str(cert)})
    assert r.returncode == 0, r.stderr
    assert same_dict(ckpt.load(tmp_path / "out.safetensors"), sd)


def test_an_unverified_server_is_refused(https, tmp_path, monkeypatch):
    n, _, _ = https
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    monkeypatch.setenv("SSL_CERT_FILE", os.devnull)  # no system CA may vouch for it either
    url = n.url("model.safetensors")
    with pytest.raises(ckpt.Error) as e:
        ckpt.open(url)
    assert url in str(e.value) and e.value.status.startswith("CKPT_E_"), str(e.value)
    r = run("inspect", url, env={"CURL_CA_BUNDLE": "", "SSL_CERT_FILE": os.devnull})
    assert r.returncode != 0 and url in r.stderr and "certificate" in r.stderr.lower(), r.stderr
    assert not (tmp_path / "out.safetensors").exists()
