"""az:// and https://ACCOUNT.blob.core.windows.net sources against an Azure
Blob Storage on loopback (path-style, as Azurite addresses it) that checks
credentials as the service does (objstores.py): SharedKey signatures
recomputed from each request, service SAS tokens (signature, time window,
permissions), anonymous reads of public containers; files, directories
(listed, in pages), ranges, the service's errors, and no credentials where
a redirect leads."""
import base64
import datetime
import secrets
import urllib.parse

import pytest
import safetensors.torch as st
import torch
from conftest import run, same_dict, state_dict
from objstores import AzureServer, Spy, make_sas

import ckpt
from statuses import status_of

ACCOUNT = "ckptacct"
VARS = ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_STORAGE_SERVICE_ENDPOINT")


@pytest.fixture(scope="module")
def azure(tmp_path_factory):
    work = tmp_path_factory.mktemp("azure")
    server, spy = AzureServer(), Spy()
    sd = state_dict(seed=4)
    data = st.save(sd, metadata={"format": "pt"})
    from huggingface_hub import save_torch_state_dict
    shards = work / "shards"
    shards.mkdir()
    save_torch_state_dict(sd, shards, max_shard_size="600KB")
    blobs = {"llm/model.safetensors": data, "deep/llm/model.safetensors": data}
    for f in shards.iterdir():
        blobs[f"sharded/{f.name}"] = f.read_bytes()
    server.keys = {ACCOUNT: base64.b64encode(secrets.token_bytes(64)).decode()}
    server.containers = {(ACCOUNT, "models"): blobs, (ACCOUNT, "open"): {"llm/model.safetensors": data}}
    server.public = {(ACCOUNT, "open")}
    server.redirects[(ACCOUNT, "models", "moved/model.safetensors")] = spy.url + "/elsewhere/model.safetensors"
    server.sd, server.data, server.spy = sd, data, spy
    server.shards = sorted(f.name for f in shards.iterdir())
    try:
        yield server
    finally:
        server.close()
        spy.close()


def connection(azure, key=None):
    cs = f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};BlobEndpoint={azure.url}/{ACCOUNT};"
    return cs + (f"AccountKey={key};" if key else "")


@pytest.fixture
def env(azure, monkeypatch):
    """The account's endpoint on loopback, no credentials (in this process too)."""
    for k in VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", connection(azure))
    azure.requests.clear()
    azure.spy.requests.clear()
    return {"AZURE_STORAGE_CONNECTION_STRING": connection(azure)}


def shared_key(azure, env, monkeypatch, key=None):
    cs = connection(azure, key or azure.keys[ACCOUNT])
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", cs)
    return dict(env, AZURE_STORAGE_CONNECTION_STRING=cs)


def check_forms(azure, prefix, check):
    expected = st.load(azure.data)
    assert same_dict(ckpt.load(prefix + "models/llm/model.safetensors"), expected)
    for name in (prefix + "models/sharded/", prefix + "models/sharded",
                 prefix + "models/sharded/model.safetensors.index.json"):
        got = ckpt.load(name)
        assert same_dict(got, azure.sd), name
        with ckpt.open(name) as c:
            assert all(f.startswith(prefix + "models/sharded/") for f in c.files)
    assert same_dict(ckpt.load(prefix + "models/deep/llm"), expected)
    assert azure.requests and all(check(r) for r in azure.requests), [r for r in azure.requests if not check(r)]
    listings = [r for r in azure.requests if "comp=list" in r[1]]
    assert len(listings) >= 3 and all(r[1].startswith(f"/{ACCOUNT}/models?") for r in listings)


def test_shared_key(azure, env, monkeypatch, tmp_path):
    e = shared_key(azure, env, monkeypatch)
    for prefix in (f"az://{ACCOUNT}/", f"https://{ACCOUNT}.blob.core.windows.net/"):
        azure.requests.clear()
        check_forms(azure, prefix, lambda r: (r[5] or "").startswith(f"SharedKey {ACCOUNT}:"))
    r = run("convert", f"az://{ACCOUNT}/models/llm/model.safetensors", tmp_path / "m.safetensors", env=e)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "m.safetensors").read_bytes() == azure.data
    r = run("inspect", f"az://{ACCOUNT}/models/sharded", env=e)
    assert r.returncode == 0 and f"az://{ACCOUNT}/models/sharded/" in r.stdout, r.stderr


def test_sas_token_from_the_environment(azure, env, monkeypatch):
    sas = make_sas(ACCOUNT, azure.keys[ACCOUNT], "models")
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", "?" + sas)
    check_forms(azure, f"az://{ACCOUNT}/", lambda r: r[5] is None and "sig=" in r[1])


def test_sas_token_in_the_url(azure, env):
    sas = make_sas(ACCOUNT, azure.keys[ACCOUNT], "models", "llm/model.safetensors", permissions="r")
    sig = dict(p.split("=", 1) for p in sas.split("&"))["sig"]
    name = f"https://{ACCOUNT}.blob.core.windows.net/models/llm/model.safetensors?{sas}"
    assert same_dict(ckpt.load(name), st.load(azure.data))
    with ckpt.open(name) as c:
        assert all(sig not in f for f in c.files) and sig not in c.path and "sig=REDACTED" in c.path
    # A blob's SAS reads that blob only.
    other = f"https://{ACCOUNT}.blob.core.windows.net/models/deep/llm/model.safetensors?{sas}"
    with pytest.raises(ckpt.RemoteError) as e:
        ckpt.open(other)
    assert status_of(e.value) == "CKPT_E_AUTH/CKPT_D_HTTP_AUTH" and "AuthenticationFailed" in str(e.value)
    assert sig not in str(e.value) and "REDACTED" in str(e.value)


@pytest.mark.parametrize("form", ["az://{a}/models/sharded/?{sas}", "az://{a}/models/sharded?{sas}",
                                  "https://{a}.blob.core.windows.net/models/sharded/?{sas}"])
def test_sas_token_in_a_directory_url(azure, env, form):
    """A container's SAS token in a directory's URL goes to every blob of
    the directory (listed, then read), and is shown nowhere."""
    sas = make_sas(ACCOUNT, azure.keys[ACCOUNT], "models")
    sig = dict(p.split("=", 1) for p in sas.split("&"))["sig"]
    name = form.format(a=ACCOUNT, sas=sas)
    assert same_dict(ckpt.load(name), azure.sd)
    assert azure.requests and all(r[5] is None and "sig=" in r[1] for r in azure.requests), azure.requests
    assert any("comp=list" in r[1] for r in azure.requests)
    with ckpt.open(name) as c:
        shown = [c.path, *c.files]
        assert len(c.files) > 1 and all("/models/sharded/model" in f and "?" not in f for f in c.files), shown
    assert not any(sig in f or urllib.parse.quote(sig, safe="") in f for f in shown)
    # The CLI's output, and its errors, keep it too.
    r = run("inspect", name, env=env)
    assert r.returncode == 0 and f"/models/sharded/" in r.stdout and sig not in r.stdout + r.stderr, r.stderr
    expired = make_sas(ACCOUNT, azure.keys[ACCOUNT], "models", expiry=datetime.datetime(2020, 1, 1),
                       start=datetime.datetime(2019, 1, 1))
    bad = form.format(a=ACCOUNT, sas=expired)
    r = run("inspect", bad, env=env)
    old = dict(p.split("=", 1) for p in expired.split("&"))["sig"]
    assert r.returncode == 1 and "[CKPT_E_AUTH/CKPT_D_HTTP_AUTH]" in r.stderr and "time frame" in r.stderr, r.stderr
    assert "/models/sharded" in r.stderr and old not in r.stderr and urllib.parse.quote(old, safe="") not in r.stderr


def test_expired_sas(azure, env, monkeypatch):
    past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
    sas = make_sas(ACCOUNT, azure.keys[ACCOUNT], "models", expiry=past, start=past - datetime.timedelta(hours=1))
    r = run("inspect", f"az://{ACCOUNT}/models/llm/model.safetensors", env=dict(env, AZURE_STORAGE_SAS_TOKEN=sas))
    assert r.returncode == 1 and "[CKPT_E_AUTH/CKPT_D_HTTP_AUTH]" in r.stderr, r.stderr
    assert "AuthenticationFailed" in r.stderr and "Signature not valid in the specified time frame" in r.stderr
    assert f"az://{ACCOUNT}/models/llm/model.safetensors" in r.stderr
    assert dict(p.split("=", 1) for p in sas.split("&"))["sig"] not in r.stderr


def test_wrong_key(azure, env, monkeypatch):
    wrong = base64.b64encode(secrets.token_bytes(64)).decode()
    e = shared_key(azure, env, monkeypatch, key=wrong)
    r = run("inspect", f"az://{ACCOUNT}/models/llm/model.safetensors", env=e)
    assert r.returncode == 1 and "[CKPT_E_AUTH/CKPT_D_HTTP_AUTH]" in r.stderr, r.stderr
    assert "AuthenticationFailed" in r.stderr and "MAC signature" in r.stderr and wrong not in r.stderr
    r = run("inspect", f"az://{ACCOUNT}/models/sharded/", env=e)
    assert r.returncode == 1 and "AuthenticationFailed" in r.stderr and "[CKPT_E_AUTH" in r.stderr


def test_missing(azure, env, monkeypatch, tmp_path):
    e = shared_key(azure, env, monkeypatch)
    r = run("inspect", f"az://{ACCOUNT}/models/llm/nope.safetensors", env=e)
    assert r.returncode == 1 and "BlobNotFound" in r.stderr and "[CKPT_E_NOT_FOUND]" in r.stderr, r.stderr
    assert f"az://{ACCOUNT}/models/llm/nope.safetensors" in r.stderr and "HTTP 404" in r.stderr
    r = run("inspect", f"az://{ACCOUNT}/nothing/x.safetensors", env=e)
    assert r.returncode == 1 and "ContainerNotFound" in r.stderr
    r = run("convert", f"az://{ACCOUNT}/models/llm/nope.safetensors", tmp_path / "o.safetensors", env=e)
    assert r.returncode == 1 and not (tmp_path / "o.safetensors").exists()
    r = run("inspect", "az://only-an-account", env=e)
    assert r.returncode == 2 and "az://ACCOUNT/CONTAINER/BLOB" in r.stderr


def test_anonymous(azure, env):
    assert same_dict(ckpt.load(f"az://{ACCOUNT}/open/llm/model.safetensors"), st.load(azure.data))
    assert all(r[5] is None and "sig=" not in r[1] for r in azure.requests)
    r = run("inspect", f"az://{ACCOUNT}/models/llm/model.safetensors", env=env)
    assert r.returncode == 1 and "ResourceNotFound" in r.stderr and "[CKPT_E_NOT_FOUND]" in r.stderr, r.stderr
    assert "AZURE_STORAGE_SAS_TOKEN" in r.stderr and "AZURE_STORAGE_KEY" in r.stderr


def test_range_reads_and_headers_only(azure, env, monkeypatch):
    e = shared_key(azure, env, monkeypatch)
    with ckpt.open(f"az://{ACCOUNT}/models/llm/model.safetensors") as c:
        t = c.get("layers.2.norm.weight")
    assert torch.equal(torch.as_tensor(t), azure.sd["layers.2.norm.weight"])
    gets = [r for r in azure.requests if r[0] == "GET" and r[1] == f"/{ACCOUNT}/models/llm/model.safetensors"]
    assert gets and all(r[2] and r[2].startswith("bytes=") for r in gets)
    assert sum(r[4] for r in azure.requests) < len(azure.data)
    azure.requests.clear()
    r = run("inspect", f"az://{ACCOUNT}/models/sharded/", env=e)
    assert r.returncode == 0, r.stderr
    data = [x for x in azure.requests if x[0] == "GET" and x[1].endswith(".safetensors")]
    sizes = [len(azure.containers[ACCOUNT, "models"]["sharded/" + n]) for n in azure.shards if n.endswith(".safetensors")]
    assert data and all(x[2] == "bytes=0-262143" for x in data) and sum(x[4] for x in data) < sum(sizes) / 2


def test_no_credentials_where_a_redirect_leads(azure, env, monkeypatch):
    shared_key(azure, env, monkeypatch)
    with pytest.raises(ckpt.Error) as e:
        ckpt.open(f"az://{ACCOUNT}/models/moved/model.safetensors")
    assert "307" in str(e.value) and "Azure requests do not follow" in str(e.value)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", connection(azure))
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", make_sas(ACCOUNT, azure.keys[ACCOUNT], "models"))
    with pytest.raises(ckpt.Error):
        ckpt.open(f"az://{ACCOUNT}/models/moved/model.safetensors")
    assert azure.requests and not azure.spy.requests


def test_blob_replaced_mid_load(azure, env, monkeypatch):
    shared_key(azure, env, monkeypatch)
    c = ckpt.open(f"az://{ACCOUNT}/models/llm/model.safetensors")
    blobs = azure.containers[ACCOUNT, "models"]
    blobs["llm/model.safetensors"] = st.save({k: v + 1 if v.is_floating_point() else v for k, v in azure.sd.items()},
                                             metadata={"format": "pt"})
    try:
        with pytest.raises(ckpt.RemoteError) as e:
            c.get("head.weight")
        assert status_of(e.value) == "CKPT_E_REMOTE/CKPT_D_REMOTE_CHANGED" and "ConditionNotMet" in str(e.value)
    finally:
        blobs["llm/model.safetensors"] = azure.data
        c.close()


def test_account_and_key_variables(azure, env, monkeypatch):
    """The Azure CLI's variables, without a connection string; the key goes
    to its own account only."""
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_KEY", azure.keys[ACCOUNT])
    monkeypatch.setenv("AZURE_STORAGE_SERVICE_ENDPOINT", f"{azure.url}/{ACCOUNT}")
    check_forms(azure, f"az://{ACCOUNT}/", lambda r: (r[5] or "").startswith(f"SharedKey {ACCOUNT}:"))
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", "someoneelse")
    for proxy in ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):  # nothing leaves the machine
        monkeypatch.setenv(proxy, "http://proxy.invalid:9")
    monkeypatch.setenv("no_proxy", "")
    monkeypatch.setenv("NO_PROXY", "")
    azure.requests.clear()
    with pytest.raises(ckpt.RemoteError) as e:  # to https://ckptacct.blob.core.windows.net, without the key
        ckpt.open(f"az://{ACCOUNT}/models/llm/model.safetensors", retries=0)
    assert status_of(e.value) == "CKPT_E_NETWORK/CKPT_D_NETWORK" and not azure.requests


def test_development_storage():
    """UseDevelopmentStorage=true: Azurite's account, key and endpoint."""
    try:
        server = AzureServer(port=10000)
    except OSError:
        pytest.skip("port 10000 (Azurite's) is taken")
    try:
        dev = "devstoreaccount1"
        server.keys = {dev: "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="}
        sd = state_dict(seed=5, layers=1)
        server.containers = {(dev, "c"): {"m.safetensors": st.save(sd)}}
        r = run("inspect", f"az://{dev}/c/m.safetensors",
                env={"AZURE_STORAGE_CONNECTION_STRING": "UseDevelopmentStorage=true"})
        assert r.returncode == 0 and "head.weight" in r.stdout, r.stderr
        assert server.requests and all((x[5] or "").startswith(f"SharedKey {dev}:") for x in server.requests)
    finally:
        server.close()
