"""gs:// sources against a Google Cloud Storage XML API on loopback that
checks credentials as the service does (objstores.py): HMAC keys (V4
signatures, GOOG4-HMAC-SHA256), a service account's key file (an RS256 JWT
exchanged at its token_uri), an authorized user's refresh token, the
metadata server, anonymous reads of public buckets; files, directories
(listed, in pages), ranges, the service's errors, and no credentials where
a redirect leads."""
import json
import time

import pytest
import safetensors.torch as st
import torch
from conftest import run, same_dict, state_dict
from objstores import GcsServer, MetadataServer, Spy, TokenServer, service_account

import ckpt
from statuses import status_of

VARS = ("GS_ACCESS_KEY_ID", "GS_SECRET_ACCESS_KEY", "GOOGLE_APPLICATION_CREDENTIALS", "GCE_METADATA_HOST",
        "STORAGE_EMULATOR_HOST", "CLOUDSDK_CONFIG")
HMAC_ID, HMAC_SECRET = "GOOG1EXAMPLEACCESSID", "bGoa+V7g/yqDXvKRqq+JTFn4uQZbPiQJo4pf9RzJ"


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    pytest.importorskip("cryptography")
    work = tmp_path_factory.mktemp("gcs")
    server = GcsServer()
    tokens, metadata, spy = TokenServer(server), MetadataServer(server), Spy()
    sd = state_dict(seed=3)
    data = st.save(sd, metadata={"format": "pt"})
    from huggingface_hub import save_torch_state_dict
    shards = work / "shards"
    shards.mkdir()
    save_torch_state_dict(sd, shards, max_shard_size="600KB")
    objects = {"llm/model.safetensors": data, "deep/llm/model.safetensors": data}
    for f in shards.iterdir():
        objects[f"sharded/{f.name}"] = f.read_bytes()
    server.buckets = {"models": dict(objects), "open": {"llm/model.safetensors": data}}
    server.public = {"open"}
    server.hmac_keys = {HMAC_ID: HMAC_SECRET}
    server.redirects[("models", "moved/model.safetensors")] = spy.url + "/elsewhere/model.safetensors"
    info, public = service_account(tokens.token_uri)
    tokens.accounts[info["client_email"]] = public
    tokens.refresh["1//refresh-token"] = ("client-id.apps.googleusercontent.com", "client-secret")
    server.sd, server.data, server.shards = sd, data, sorted(f.name for f in shards.iterdir())
    server.token_server, server.metadata, server.spy, server.key_info = tokens, metadata, spy, info
    server.work = work
    try:
        yield server
    finally:
        for s in (server, tokens, metadata, spy):
            s.close()


@pytest.fixture
def env(gcs, monkeypatch, tmp_path):
    """No credentials, the endpoint on loopback (in this process too)."""
    for k in VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.host)    # host:port, as Google's clients take it
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))  # no gcloud credentials of this machine
    gcs.requests.clear()
    gcs.spy.requests.clear()
    return {k: v for k, v in {"STORAGE_EMULATOR_HOST": gcs.host,
                              "CLOUDSDK_CONFIG": str(tmp_path / "gcloud")}.items()}


def hmac_env(env, monkeypatch, secret=HMAC_SECRET, key_id=HMAC_ID):
    monkeypatch.setenv("GS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("GS_SECRET_ACCESS_KEY", secret)
    return dict(env, GS_ACCESS_KEY_ID=key_id, GS_SECRET_ACCESS_KEY=secret)


def key_file(gcs, tmp_path, monkeypatch, info=None, name="key.json"):
    path = tmp_path / name
    path.write_text(json.dumps(info or gcs.key_info))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    return path


def check_forms(gcs, scheme_of_auth):
    """A file, a directory with and without its '/', a directory of one file."""
    expected = st.load(gcs.data)
    assert same_dict(ckpt.load("gs://models/llm/model.safetensors"), expected)
    for name in ("gs://models/sharded/", "gs://models/sharded", "gs://models/sharded/model.safetensors.index.json"):
        got = ckpt.load(name)
        assert same_dict(got, gcs.sd), name
        with ckpt.open(name) as c:
            assert all(f.startswith("gs://models/sharded/") for f in c.files)
    assert same_dict(ckpt.load("gs://models/deep/llm"), expected)
    auths = {r[5] for r in gcs.requests}
    assert auths and all(a and a.startswith(scheme_of_auth) for a in auths), [r for r in gcs.requests if not (r[5] or "").startswith(scheme_of_auth)]
    # The listings, in pages of two.
    assert sum(1 for r in gcs.requests if r[1].startswith("/models?")) >= 3


def test_hmac_keys(gcs, env, monkeypatch, tmp_path):
    e = hmac_env(env, monkeypatch)
    check_forms(gcs, "GOOG4-HMAC-SHA256 Credential=" + HMAC_ID + "/")
    r = run("convert", "gs://models/llm/model.safetensors", tmp_path / "m.safetensors", env=e)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "m.safetensors").read_bytes() == gcs.data
    r = run("inspect", "gs://models/sharded", env=e)
    assert r.returncode == 0 and "gs://models/sharded/" in r.stdout, r.stderr


def test_inspect_reads_only_headers(gcs, env, monkeypatch):
    e = hmac_env(env, monkeypatch)
    r = run("inspect", "gs://models/sharded/", env=e)
    assert r.returncode == 0, r.stderr
    data = [x for x in gcs.requests if x[0] == "GET" and "/models/sharded/" in x[1] and x[1].endswith(".safetensors")]
    sizes = {n: len(gcs.buckets["models"]["sharded/" + n]) for n in gcs.shards}
    assert data and all(x[2] == "bytes=0-262143" for x in data), data
    assert sum(x[4] for x in data) < sum(s for n, s in sizes.items() if n.endswith(".safetensors")) / 2


def test_range_reads(gcs, env, monkeypatch):
    hmac_env(env, monkeypatch)
    with ckpt.open("gs://models/llm/model.safetensors") as c:
        t = c.get("layers.3.norm.weight")
    assert torch.equal(torch.as_tensor(t), gcs.sd["layers.3.norm.weight"])
    ranges = [x[2] for x in gcs.requests if x[1] == "/models/llm/model.safetensors" and x[0] == "GET"]
    assert ranges and all(r and r.startswith("bytes=") for r in ranges)
    assert sum(x[4] for x in gcs.requests) < len(gcs.data)


def test_service_account(gcs, env, monkeypatch, tmp_path):
    path = key_file(gcs, tmp_path, monkeypatch)
    issued = gcs.token_server.issued
    check_forms(gcs, "Bearer ya29.")
    assert gcs.token_server.issued == issued + 1  # one token for the process, until it expires
    r = run("inspect", "gs://models/llm/model.safetensors", env=dict(env, GOOGLE_APPLICATION_CREDENTIALS=str(path)))
    assert r.returncode == 0, r.stderr


def test_service_account_with_a_wrong_key(gcs, env, monkeypatch, tmp_path):
    other, _ = service_account(gcs.token_server.token_uri, email=gcs.key_info["client_email"])
    path = key_file(gcs, tmp_path, monkeypatch, info=other, name="stale.json")
    with pytest.raises(ckpt.RemoteError) as e:
        ckpt.open("gs://models/llm/model.safetensors")
    text = str(e.value)
    assert status_of(e.value) == "CKPT_E_AUTH/CKPT_D_HTTP_AUTH", text
    assert "invalid_grant" in text and "Invalid JWT Signature" in text and str(path) in text
    assert "gs://models/llm/model.safetensors" in text and "PRIVATE KEY" not in text


def read_all(c, names):
    """Every tensor of an open catalog, each read now (requests of files opened earlier)."""
    return {k: torch.as_tensor(c.get(k, framework="pt")) for k in names}


def test_token_refreshed_before_it_expires(gcs, env, monkeypatch, tmp_path):
    """Tokens of two seconds' life: a load that outlasts the one its files
    were opened with asks for a fresh one before its next requests."""
    key_file(gcs, tmp_path, monkeypatch, name="short.json")
    monkeypatch.setattr(gcs.token_server, "lifetime", 2)
    issued = gcs.token_server.issued
    with ckpt.open("gs://models/sharded/") as c:
        assert len(c.files) > 1
        time.sleep(2.5)  # every token the open used has expired
        gcs.requests.clear()
        got = read_all(c, gcs.sd)
    assert same_dict(got, gcs.sd)
    data = [r for r in gcs.requests if r[0] == "GET" and r[1].endswith(".safetensors")]
    assert data and all(r[3] == 206 for r in data), data  # none refused: refreshed before
    assert gcs.token_server.issued >= issued + 2


def test_token_refused_is_renewed_once(gcs, env, monkeypatch, tmp_path):
    """A token the service refuses (expired sooner than it said): each
    request is tried once more with a fresh one, which requests refused
    together ask for once; refused again, the error is the service's."""
    key_file(gcs, tmp_path, monkeypatch, name="revoked.json")
    with ckpt.open("gs://models/sharded/") as c:
        issued = gcs.token_server.issued
        for t in list(gcs.tokens):
            gcs.tokens[t] = 0
        gcs.requests.clear()
        got = read_all(c, gcs.sd)
    assert same_dict(got, gcs.sd)
    assert [r for r in gcs.requests if r[3] == 401] and gcs.token_server.issued == issued + 1
    monkeypatch.setattr(gcs.token_server, "lifetime", 0)  # every token refused as soon as it is issued
    with ckpt.open("gs://models/sharded/") as c:
        for t in list(gcs.tokens):
            gcs.tokens[t] = 0
        gcs.requests.clear()
        with pytest.raises(ckpt.RemoteError) as e:
            read_all(c, gcs.sd)
    text = str(e.value)
    assert status_of(e.value) == "CKPT_E_AUTH/CKPT_D_HTTP_AUTH" and "AuthenticationRequired" in text, text
    assert "gs://models/sharded/" in text and "ya29." not in text
    refused = {}
    for r in gcs.requests:
        if r[3] == 401:
            refused[r[1], r[2]] = refused.get((r[1], r[2]), 0) + 1
    assert refused and set(refused.values()) == {2}, refused  # the request, and its one retry


def test_listing_and_head_renew_a_refused_token(gcs, env, monkeypatch, tmp_path):
    """A kept token the service refuses (revoked, expired sooner than it
    said): the listing of a directory and the HEAD that asks what a name
    is are tried once more with a fresh token, as the ranged GETs are."""
    key_file(gcs, tmp_path, monkeypatch, name="revoked-listing.json")
    assert same_dict(ckpt.load("gs://models/sharded/"), gcs.sd)  # a token kept for the process
    for name in ("gs://models/sharded/", "gs://models/sharded"):  # listed; asked by HEAD, then listed
        for t in list(gcs.tokens):
            gcs.tokens[t] = 0
        issued = gcs.token_server.issued
        gcs.requests.clear()
        with ckpt.open(name) as c:
            assert len(c.files) > 1
        refused = [(r[0], r[1]) for r in gcs.requests if r[3] == 401]
        assert refused and gcs.token_server.issued == issued + 1, (name, refused)
        assert any(p.startswith("/models?") for _, p in refused), refused
        if not name.endswith("/"):
            assert ("HEAD", "/models/sharded") in refused, refused
        assert all(r[3] != 401 for r in gcs.requests if r[0] == "GET" and r[1].endswith(".safetensors"))


def test_authorized_user(gcs, env, monkeypatch, tmp_path):
    info = {"type": "authorized_user", "client_id": "client-id.apps.googleusercontent.com",
            "client_secret": "client-secret", "refresh_token": "1//refresh-token",
            "token_uri": gcs.token_server.token_uri}
    key_file(gcs, tmp_path, monkeypatch, info=info, name="user.json")
    assert same_dict(ckpt.load("gs://models/llm/model.safetensors"), st.load(gcs.data))


def test_metadata_server(gcs, env, monkeypatch):
    monkeypatch.setenv("GCE_METADATA_HOST", gcs.metadata.host)
    check_forms(gcs, "Bearer ya29.m-")
    assert all(r[0] == "GET" for r in gcs.metadata.requests)


def test_anonymous(gcs, env):
    assert same_dict(ckpt.load("gs://open/llm/model.safetensors"), st.load(gcs.data))
    assert all(r[5] is None for r in gcs.requests)
    r = run("inspect", "gs://models/llm/model.safetensors", env=env)
    assert r.returncode == 1 and "[CKPT_E_AUTH/CKPT_D_HTTP_AUTH]" in r.stderr, r.stderr
    assert "AccessDenied" in r.stderr
    assert "gs://models/llm/model.safetensors" in r.stderr and "GS_ACCESS_KEY_ID" in r.stderr
    assert "GOOGLE_APPLICATION_CREDENTIALS" in r.stderr
    r = run("inspect", "gs://models/sharded/", env=env)
    assert r.returncode == 1 and "[CKPT_E_AUTH/CKPT_D_HTTP_AUTH]" in r.stderr and "AccessDenied" in r.stderr


def test_errors_are_clear_and_keep_secrets(gcs, env, monkeypatch, tmp_path):
    e = hmac_env(env, monkeypatch)
    r = run("inspect", "gs://models/llm/model.safetensors", env=dict(e, GS_SECRET_ACCESS_KEY="not-the-secret"))
    assert r.returncode == 1 and "SignatureDoesNotMatch" in r.stderr and "[CKPT_E_AUTH/CKPT_D_HTTP_AUTH]" in r.stderr
    assert "not-the-secret" not in r.stderr and "gs://models/llm/model.safetensors" in r.stderr
    r = run("inspect", "gs://models/llm/model.safetensors", env=dict(e, GS_ACCESS_KEY_ID="GOOG1UNKNOWN"))
    assert r.returncode == 1 and "InvalidAccessKeyId" in r.stderr and "[CKPT_E_AUTH" in r.stderr
    r = run("inspect", "gs://models/llm/nope.safetensors", env=e)
    assert r.returncode == 1 and "NoSuchKey" in r.stderr and "[CKPT_E_NOT_FOUND]" in r.stderr
    assert "gs://models/llm/nope.safetensors" in r.stderr and "HTTP 404" in r.stderr
    r = run("inspect", "gs://no-such-bucket/x.safetensors", env=e)
    assert r.returncode == 1 and "NoSuchBucket" in r.stderr
    r = run("convert", "gs://models/llm/nope.safetensors", tmp_path / "o.safetensors", env=e)
    assert r.returncode == 1 and not (tmp_path / "o.safetensors").exists()
    r = run("inspect", "gs://", env=e)
    assert r.returncode == 2 and "bucket" in r.stderr


def test_no_credentials_where_a_redirect_leads(gcs, env, monkeypatch, tmp_path):
    hmac_env(env, monkeypatch)
    with pytest.raises(ckpt.Error) as e:
        ckpt.open("gs://models/moved/model.safetensors")
    assert "307" in str(e.value) and "GCS requests do not follow" in str(e.value)
    monkeypatch.delenv("GS_ACCESS_KEY_ID")
    key_file(gcs, tmp_path, monkeypatch)
    with pytest.raises(ckpt.Error):
        ckpt.open("gs://models/moved/model.safetensors")
    assert gcs.requests and not gcs.spy.requests


def test_object_replaced_mid_load(gcs, env, monkeypatch):
    hmac_env(env, monkeypatch)
    c = ckpt.open("gs://models/llm/model.safetensors")
    other = st.save({k: v + 1 if v.is_floating_point() else v for k, v in gcs.sd.items()}, metadata={"format": "pt"})
    gcs.buckets["models"]["llm/model.safetensors"] = other
    try:
        with pytest.raises(ckpt.RemoteError) as e:
            c.get("head.weight")
        assert status_of(e.value) == "CKPT_E_REMOTE/CKPT_D_REMOTE_CHANGED" and "PreconditionFailed" in str(e.value)
    finally:
        gcs.buckets["models"]["llm/model.safetensors"] = gcs.data
        c.close()
