"""s3:// sources against moto's S3 server on loopback, with signatures
checked (moto's IAM authentication on): SigV4 through libcurl, session
tokens, S3's error codes, index and "directory" names — prefixes listed
with ListObjectsV2, in pages of two keys — If-Match."""
import io
import json
import os

import pytest
import reference_writers
import safetensors.torch as st
import torch
from conftest import run, same_dict, state_dict
from servers import Moto, moto_available

import ckpt
import ckpt.torch
from statuses import status_of

POLICY = json.dumps({"Version": "2012-10-17",
                     "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]})


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    if not moto_available():
        pytest.skip("moto[server] is not installed (requirements-dev.txt)")
    work = tmp_path_factory.mktemp("moto")
    with Moto(work, max_keys=2) as m:
        client = m.client()
        client.create_bucket(Bucket="models")
        sd = state_dict(seed=2)
        data = st.save(sd, metadata={"format": "pt"})
        client.put_object(Bucket="models", Key="llm/model.safetensors", Body=data)
        # Sharded, written by huggingface_hub, under a "directory".
        from huggingface_hub import save_torch_state_dict
        shards = work / "shards"
        shards.mkdir()
        save_torch_state_dict(sd, shards, max_shard_size="250KB")
        for f in shards.iterdir():
            client.put_object(Bucket="models", Key=f"sharded/{f.name}", Body=f.read_bytes())
        # The same in shards too large to be read by their headers' request.
        big = work / "big"
        big.mkdir()
        save_torch_state_dict(sd, big, max_shard_size="600KB")
        for f in big.iterdir():
            client.put_object(Bucket="models", Key=f"big/{f.name}", Body=f.read_bytes())
        # gguf-split parts: a set of shards without an index, found by listing.
        m.split = split_parts(work / "split")
        for f in (work / "split").iterdir():
            client.put_object(Bucket="models", Key=f"split/{f.name}", Body=f.read_bytes())
        buf = io.BytesIO()
        torch.save(sd, buf)
        client.put_object(Bucket="models", Key="weird name+/pytorch_model.bin", Body=buf.getvalue())
        # A reader with keys, and temporary credentials of a role it assumes.
        iam = m.client("iam")
        iam.create_user(UserName="reader")
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        iam.put_user_policy(UserName="reader", PolicyName="all", PolicyDocument=POLICY)
        trust = json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]})
        role = iam.create_role(RoleName="loader", AssumeRolePolicyDocument=trust)["Role"]
        iam.put_role_policy(RoleName="loader", PolicyName="all", PolicyDocument=POLICY)
        creds = m.client("sts", key["AccessKeyId"], key["SecretAccessKey"]).assume_role(
            RoleArn=role["Arn"], RoleSessionName="ckpt")["Credentials"]
        m.enforce_auth()
        m.keys = (key["AccessKeyId"], key["SecretAccessKey"])
        m.temporary = (creds["AccessKeyId"], creds["SecretAccessKey"], creds["SessionToken"])
        m.sd, m.data = sd, data
        yield m


def split_parts(d):
    """Three gguf-split parts of one tensor each (360 KB), as the gguf package writes them."""
    d.mkdir()
    g = torch.Generator().manual_seed(7)
    tensors = {name: torch.randn(300, 300, generator=g) for name in ("a", "b", "c")}
    parts = reference_writers.gguf_split(d / "model.gguf", {k: v.numpy() for k, v in tensors.items()}, 1)
    assert [p.name for p in parts] == [f"model-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    return tensors


@pytest.fixture
def env(s3, monkeypatch):
    """The variables that point ckpt (in this process too) at moto."""
    e = s3.env(*s3.keys)
    for k, v in e.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    return e


def test_load_and_convert_from_s3(s3, env, tmp_path):
    expected = st.load(s3.data)
    assert same_dict(ckpt.load("s3://models/llm/model.safetensors"), expected)
    assert same_dict(ckpt.torch.load_file("s3://models/llm/model.safetensors"), expected)
    target = {k: torch.empty_like(v) for k, v in expected.items()}
    ckpt.load_into(target, "s3://models/llm/model.safetensors")
    assert same_dict(target, expected)
    r = run("convert", "s3://models/llm/model.safetensors", tmp_path / "m.safetensors", env=env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "m.safetensors").read_bytes() == s3.data
    r = run("inspect", "s3://models/llm/model.safetensors", env=env)
    assert r.returncode == 0 and "s3://models/llm/model.safetensors" in r.stdout


@pytest.mark.parametrize("name", ["s3://models/sharded/model.safetensors.index.json", "s3://models/sharded/",
                                  "s3://models/weird name+/pytorch_model.bin"])
def test_s3_forms(s3, env, name):
    got = ckpt.load(name)
    assert set(got) == set(s3.sd) and all(torch.equal(got[k], s3.sd[k]) for k in s3.sd)
    with ckpt.open(name) as c:
        assert all(f.startswith("s3://models/") for f in c.files)


def test_session_token(s3, env, monkeypatch):
    key, secret, token = s3.temporary
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    assert same_dict(ckpt.load("s3://models/llm/model.safetensors"), st.load(s3.data))
    monkeypatch.setenv("AWS_SESSION_TOKEN", token[:-4] + "AAAA")
    with pytest.raises(ckpt.RemoteError) as e:
        ckpt.open("s3://models/llm/model.safetensors")
    assert status_of(e.value) in ("CKPT_E_AUTH/CKPT_D_HTTP_AUTH", "CKPT_E_REMOTE/CKPT_D_HTTP_STATUS"), str(e.value)
    assert token[:20] not in str(e.value) and "InvalidToken" in str(e.value)


def test_s3_errors_are_clear_and_keep_secrets(s3, env, tmp_path):
    key, secret = s3.keys
    r = run("inspect", "s3://models/llm/model.safetensors", env=dict(env, AWS_SECRET_ACCESS_KEY="not-the-secret"))
    assert r.returncode == 1 and "SignatureDoesNotMatch" in r.stderr and "[CKPT_E_AUTH/CKPT_D_HTTP_AUTH]" in r.stderr
    assert "not-the-secret" not in r.stderr and key not in r.stderr
    r = run("inspect", "s3://models/llm/nope.safetensors", env=env)
    assert r.returncode == 1 and "NoSuchKey" in r.stderr and "[CKPT_E_NOT_FOUND]" in r.stderr
    assert "s3://models/llm/nope.safetensors" in r.stderr and "HTTP 404" in r.stderr
    r = run("inspect", "s3://no-such-bucket/x.safetensors", env=env)
    assert r.returncode == 1 and "NoSuchBucket" in r.stderr
    r = run("convert", "s3://models/llm/nope.safetensors", tmp_path / "o.safetensors", env=env)
    assert r.returncode == 1 and not list(tmp_path.iterdir())
    r = run("inspect", "s3://", env=env)
    assert r.returncode == 2 and "bucket" in r.stderr


def test_object_replaced_mid_load(s3, env):
    c = ckpt.open("s3://models/llm/model.safetensors")
    other = st.save({k: v + 1 if v.is_floating_point() else v for k, v in s3.sd.items()}, metadata={"format": "pt"})
    admin = s3.client(key=s3.keys[0], secret=s3.keys[1])
    admin.put_object(Bucket="models", Key="llm/model.safetensors", Body=other)
    try:
        with pytest.raises(ckpt.RemoteError) as e:
            c.get("head.weight")
        assert status_of(e.value) == "CKPT_E_REMOTE/CKPT_D_REMOTE_CHANGED" and "412" in str(e.value)
    finally:
        admin.put_object(Bucket="models", Key="llm/model.safetensors", Body=s3.data)
        c.close()


@pytest.mark.parametrize("name", ["s3://models/big/", "s3://models/big"])
def test_s3_directory_with_an_index(s3, env, name):
    """A prefix with or without its '/' (no such object: a prefix of some)."""
    assert same_dict(ckpt.load(name), s3.sd)
    with ckpt.open(name) as c:
        assert c.files and all(f.startswith("s3://models/big/model-") for f in c.files), c.files


@pytest.mark.parametrize("name", ["s3://models/split/", "s3://models/split"])
def test_s3_directory_listed_in_pages(s3, env, name):
    """Shards without an index are found by listing the prefix:
    ListObjectsV2, signed, page after page (two keys a page)."""
    s3.record()
    got = ckpt.load(name)
    assert set(got) == set(s3.split) and all(torch.equal(torch.as_tensor(got[k]), s3.split[k]) for k in s3.split)
    listings = [r for r in s3.recorded() if "list-type=2" in r[1]]
    assert len(listings) >= 2 and any("continuation-token=" in r[1] for r in listings), listings
    assert all("delimiter=%2F" in r[1] and "prefix=split%2F" in r[1] for r in listings), listings


def test_s3_inspect_reads_only_headers(s3, env):
    """A prefix named without its '/' (a prefix of objects, listed) reads
    each shard's header only."""
    s3.record()
    r = run("inspect", "s3://models/big", env=env)
    assert r.returncode == 0 and "s3://models/big/" in r.stdout, r.stderr
    data = [x for x in s3.recorded() if x[0] == "GET" and x[1].endswith(".safetensors")]
    admin = s3.client(key=s3.keys[0], secret=s3.keys[1])
    sizes = [o["Size"] for o in admin.list_objects_v2(Bucket="models", Prefix="big/model-", MaxKeys=100)["Contents"]]
    assert len(data) == len(sizes) > 1 and all(x[2] == "bytes=0-262143" for x in data), data
    assert sum(min(size, 262144) for size in sizes) < sum(sizes) / 2, sizes


def test_s3_gguf_inspect_reads_only_what_the_opening_request_brought(s3, env):
    """A GGUF whose header fits in the first 256 KiB (here gguf-split parts
    of 360 KB) is inspected with each part's opening request alone: its
    header reader's first refill is what that request brought."""
    s3.record()
    r = run("inspect", "s3://models/split/", env=env)
    assert r.returncode == 0 and "model-00001-of-00003.gguf" in r.stdout, r.stderr
    data = [x for x in s3.recorded() if x[0] == "GET" and x[1].endswith(".gguf")]
    assert len(data) == 3 and all(x[2] == "bytes=0-262143" for x in data), data


def test_s3_directory_errors(s3, env):
    r = run("inspect", "s3://models/nothing/", env=env)
    assert r.returncode == 1 and "[CKPT_E_NOT_FOUND]" in r.stderr and "s3://models/nothing/" in r.stderr, r.stderr
    assert "empty" in r.stderr, r.stderr
    r = run("inspect", "s3://models/nothing", env=env)
    assert r.returncode == 1 and "NoSuchKey" in r.stderr and "[CKPT_E_NOT_FOUND]" in r.stderr, r.stderr
    # The listing's signature is checked as the objects' are.
    r = run("inspect", "s3://models/split/", env=dict(env, AWS_SECRET_ACCESS_KEY="not-the-secret"))
    assert r.returncode == 1 and "SignatureDoesNotMatch" in r.stderr and "[CKPT_E_AUTH/CKPT_D_HTTP_AUTH]" in r.stderr
    assert "s3://models/split/" in r.stderr and "listing the directory" in r.stderr and "not-the-secret" not in r.stderr
