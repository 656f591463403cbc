"""hf://org/name[@revision][/path]: a Hugging Face Hub repo as a source,
against the test Hub (hub.py) through HF_ENDPOINT, with the Hub's own cache
shared with huggingface_hub in both directions."""
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import BIN, same_dict  # noqa: E402
from hub import HubServer  # noqa: E402


def checkpoint(tmp, layers=10, width=512, shard="6MB"):
    """A sharded safetensors model (huggingface_hub's save_torch_state_dict)
    of about 4 × layers × width² bytes, as {path: bytes}, and its state dict."""
    from huggingface_hub import save_torch_state_dict
    g = torch.Generator().manual_seed(1)
    sd = {f"layers.{i}.{k}": torch.randn(width, width, generator=g) for i in range(layers) for k in ("q", "k")}
    sd["norm"] = torch.randn(width, generator=g).to(torch.bfloat16)
    d = tmp / "model"
    d.mkdir()
    save_torch_state_dict(sd, d, max_shard_size=shard)
    files = {p.name: p.read_bytes() for p in d.iterdir()}
    files["config.json"] = b'{"model_type": "llama"}'
    return files, sd


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return checkpoint(tmp_path_factory.mktemp("hf"))


@pytest.fixture()
def hub(model):
    files, _ = model
    with HubServer() as h:
        h.add("org/model", files)
        h.add("org/gated", files, gated=True, tokens={"hf_good"})
        h.add("org/private", files, private=True, tokens={"hf_good"})
        yield h


@pytest.fixture()
def env(hub, tmp_path):
    e = dict(os.environ, HF_ENDPOINT=hub.endpoint, HF_HUB_CACHE=str(tmp_path / "cache"), HF_HOME=str(tmp_path / "home"),
             HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_TELEMETRY="1")
    for k in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_TOKEN_PATH"):
        e.pop(k, None)
    return e


def ckpt(env, *args, **kw):
    return subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, env=env, **kw)


def py(env, code):
    """Python (ckpt or huggingface_hub) in a fresh process with `env`."""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


LOAD = ("import ckpt, torch, sys; sd = ckpt.load(sys.argv[1] if len(sys.argv) > 1 else 'hf://org/model'); "
        "torch.save(sd, {out!r})")


def load(env, tmp_path, name="hf://org/model"):
    out = tmp_path / f"sd{len(list(tmp_path.glob('sd*')))}.pt"
    r = subprocess.run([sys.executable, "-c", LOAD.format(out=str(out)), name], capture_output=True, text=True,
                       env=env)
    return r, (torch.load(out) if r.returncode == 0 else None)


def repo_dir(env, repo="org/model"):
    return Path(env["HF_HUB_CACHE"]) / ("models--" + repo.replace("/", "--"))


def test_inspect_reads_only_headers(hub, env, model):
    files, sd = model
    total = sum(len(b) for b in files.values())
    assert total > 20e6 and sum(n.endswith(".safetensors") for n in files) >= 4
    r = ckpt(env, "inspect", "hf://org/model")
    assert r.returncode == 0, r.stderr
    assert f"{len(sd)} tensors" in r.stdout
    sha = hub.repos["org/model"].branches["main"]
    assert f"hf://org/model@{sha}/model-00001-of-" in r.stdout  # the files of one commit
    assert hub.sent() < 200_000, hub.requests
    assert not list(repo_dir(env).glob("blobs/*.incomplete"))


def test_load_fills_the_hub_cache_for_huggingface_hub(hub, env, model, tmp_path):
    files, sd = model
    r, got = load(env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert same_dict(got, sd)
    sha = hub.repos["org/model"].branches["main"]
    snap = repo_dir(env) / "snapshots" / sha
    assert (repo_dir(env) / "refs" / "main").read_text() == sha
    for name in files:
        if name.endswith(".safetensors") or name.endswith(".json") and name != "config.json":
            assert (snap / name).is_symlink() and os.readlink(snap / name).startswith("../../blobs/")
            assert (snap / name).read_bytes() == files[name]
    blob = hashlib.sha256(files["model-00001-of-00004.safetensors"]).hexdigest()
    assert (repo_dir(env) / "blobs" / blob).is_file()
    # huggingface_hub finds them offline, with no request.
    hub.clear_log()
    out = py(dict(env, HF_HUB_OFFLINE="1"),
             "from huggingface_hub import hf_hub_download as d, snapshot_download as s; "
             "print(d('org/model', 'model-00002-of-00004.safetensors', local_files_only=True)); "
             "print(d('org/model', 'model.safetensors.index.json'))")
    first, second = out.split()
    assert Path(first).read_bytes() == files["model-00002-of-00004.safetensors"]
    assert Path(second).read_bytes() == files["model.safetensors.index.json"]
    assert hub.requests == []


def test_reads_what_huggingface_hub_downloaded_without_a_request(hub, env, model, tmp_path):
    files, sd = model
    py(env, "from huggingface_hub import snapshot_download as s; s('org/model')")
    sha = hub.repos["org/model"].branches["main"]
    hub.clear_log()
    r, got = load(env, tmp_path, f"hf://org/model@{sha}")
    assert r.returncode == 0, r.stderr
    assert same_dict(got, sd) and hub.requests == []
    r, got = load(dict(env, HF_HUB_OFFLINE="1"), tmp_path)  # the branch from refs/main
    assert r.returncode == 0, r.stderr
    assert same_dict(got, sd) and hub.requests == []
    r, got = load(env, tmp_path)  # online, a branch: the API's commit, then the snapshot
    assert r.returncode == 0, r.stderr
    assert same_dict(got, sd)
    assert [q[1].split("?")[0] for q in hub.requests] == ["/api/models/org/model/revision/main"]


def test_offline_with_nothing_cached(hub, env):
    r = ckpt(dict(env, HF_HUB_OFFLINE="1"), "inspect", "hf://org/model")
    assert r.returncode != 0 and "HF_HUB_OFFLINE" in r.stderr and "refs/main" in r.stderr
    assert hub.requests == []


def test_a_cache_whose_parents_do_not_exist_yet_is_made(hub, env, model, tmp_path):
    """A fresh account (no ~/.cache, no $HF_HOME yet): the cache and its
    parents are made, as huggingface_hub's makedirs makes them."""
    _, sd = model
    env = dict(env, HF_HOME=str(tmp_path / "fresh" / "home"))
    env.pop("HF_HUB_CACHE")
    r, got = load(env, tmp_path)
    assert r.returncode == 0, r.stderr
    same_dict(got, sd)
    assert (tmp_path / "fresh" / "home" / "hub" / "models--org--model" / "refs" / "main").is_file()


def test_a_subfolder_and_a_file(hub, env, model, tmp_path):
    files, sd = model
    hub.add("org/nested", {"weights/" + k: v for k, v in files.items()} | {"README.md": b"hi"})
    r = ckpt(env, "inspect", "hf://org/nested/weights")
    assert r.returncode == 0 and f"{len(sd)} tensors" in r.stdout, r.stderr
    r, got = load(env, tmp_path, "hf://org/nested@main/weights/model.safetensors.index.json")
    assert r.returncode == 0, r.stderr
    assert same_dict(got, sd)
    sha = hub.repos["org/nested"].branches["main"]
    link = repo_dir(env, "org/nested") / "snapshots" / sha / "weights" / "model-00001-of-00004.safetensors"
    assert os.readlink(link).startswith("../../../blobs/")
    r = ckpt(env, "inspect", "hf://org/nested/nothing-here")
    assert r.returncode != 0


@pytest.mark.parametrize("repo, token, status, words", [
    ("org/gated", None, 401, ["gated", "accept its terms", "/org/gated", "HF_TOKEN"]),
    ("org/gated", "hf_bad", 403, ["gated", "accept its terms", "/org/gated", "no access"]),
    ("org/private", None, 401, ["private", "HF_TOKEN"]),
])
def test_gated_and_private(hub, env, repo, token, status, words):
    r = ckpt(dict(env, **({"HF_TOKEN": token} if token else {})), "inspect", f"hf://{repo}")
    assert r.returncode != 0
    for w in words:
        assert w in r.stderr, r.stderr
    assert any(q[3] == status for q in hub.requests)


def test_token_from_env_and_from_the_login_file(hub, env, model, tmp_path):
    _, sd = model
    r = ckpt(dict(env, HF_TOKEN="hf_good"), "inspect", "hf://org/gated")
    assert r.returncode == 0, r.stderr
    home = Path(env["HF_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "token").write_text("hf_good\n")
    r, got = load(env, tmp_path, "hf://org/private")
    assert r.returncode == 0, r.stderr
    assert same_dict(got, sd)
    # The token goes to the Hub, never to the CDN the Hub redirects to.
    assert all(q[5] == "Bearer hf_good" for q in hub.requests if not q[1].startswith("/cdn/"))
    assert all(q[5] is None for q in hub.requests if q[1].startswith("/cdn/"))


def test_a_revision_that_moves_between_two_calls(hub, env, model, tmp_path):
    files, sd = model
    first = ckpt(env, "inspect", "--json", "hf://org/model")
    moved = dict(files)
    moved["model.safetensors"] = __import__("safetensors.torch").torch.save({"only": torch.ones(3)})
    for k in [k for k in moved if k.startswith("model-") or k.endswith(".index.json")]:
        del moved[k]
    new = hub.repos["org/model"].set_branch("main", moved)
    second = ckpt(env, "inspect", "hf://org/model")
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    assert "1 tensors" in second.stdout or "1 tensor" in second.stdout
    assert f"@{new}/model.safetensors" in second.stdout
    r, got = load(env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert list(got) == ["only"]
    assert (repo_dir(env) / "refs" / "main").read_text() == new


def test_a_corrupted_blob_is_refused_and_not_kept(hub, env, tmp_path):
    hub.corrupt = True
    r, _ = load(env, tmp_path)
    assert r.returncode != 0
    sha = hub.repos["org/model"].branches["main"]
    assert "SHA-256" in r.stderr and sha in r.stderr and "model-0000" in r.stderr, r.stderr
    assert "CHECKSUM" in r.stderr or "Checksum" in r.stderr
    blobs = [p.name for p in (repo_dir(env) / "blobs").iterdir()]
    assert not [b for b in blobs if len(b) == 64 or b.endswith(".incomplete")], blobs


def test_a_connection_cut_mid_file_resumes(hub, env, model, tmp_path):
    files, sd = model
    hub.drop_after, hub.drop_times = 1_000_000, 2
    r, got = load(env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert same_dict(got, sd)
    # Each cut body resumed where it stopped (a resumed one may be cut again: 1 MB further).
    resumed = [q for q in hub.requests if q[1].startswith("/cdn/") and q[2] and q[2].split("=")[1].split("-")[0] in
               ("1000000", "2000000")]
    assert len(resumed) == 2, hub.requests


def test_a_partial_download_resumes(hub, env, model, tmp_path):
    files, sd = model
    name = "model-00003-of-00004.safetensors"
    data = files[name]
    digest = hashlib.sha256(data).hexdigest()
    blobs = repo_dir(env) / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"{digest}.incomplete").write_bytes(data[:3_000_000])
    r, got = load(env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert same_dict(got, sd)
    served = [q for q in hub.requests if q[1] == f"/cdn/{digest}"]
    assert sum(q[4] for q in served) < len(data) - 2_900_000, served
    assert (blobs / digest).read_bytes() == data


def test_the_hub_lock_is_honoured(hub, env, model, tmp_path):
    files, sd = model
    name = "model-00001-of-00004.safetensors"
    digest = hashlib.sha256(files[name]).hexdigest()
    locks = Path(env["HF_HUB_CACHE"]) / ".locks" / "models--org--model"
    locks.mkdir(parents=True)
    with open(locks / f"{digest}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as huggingface_hub's filelock holds it while it downloads
        out = tmp_path / "late.pt"
        p = subprocess.Popen([sys.executable, "-c", LOAD.format(out=str(out))], env=env, stderr=subprocess.PIPE)
        time.sleep(3)
        assert p.poll() is None  # waiting for the lock
        assert not (repo_dir(env) / "blobs" / digest).exists()
        assert not (repo_dir(env) / "blobs" / f"{digest}.incomplete").exists()
    assert p.wait(60) == 0, p.stderr.read()
    assert same_dict(torch.load(out), sd)


@pytest.mark.parametrize("impl", ["default", "portable"])
def test_sha256_both_implementations_against_hashlib(hub, env, tmp_path, impl):
    """The streaming SHA-256 (SHA-NI where the CPU has it, and the portable
    code) agrees with hashlib's on random files of odd sizes, and catches
    one flipped bit."""
    import safetensors.torch as st
    sizes = [1, 55, 64, 65, 4097, 70_001, 1_048_583, 3 * 2**20 + 17]
    files = {f"t{n}.safetensors": st.save({"x": torch.from_numpy(__import__("numpy").frombuffer(os.urandom(n), "u1"))})
             for n in sizes}
    hub.add("org/odd", files)
    e = dict(env, **({"CKPT_SHA256": "portable"} if impl == "portable" else {}))
    code = ("import ckpt, sys\nfor n in sys.argv[1:]: ckpt.load(f'hf://org/odd/t{n}.safetensors')")
    r = subprocess.run([sys.executable, "-c", code, *map(str, sizes)], capture_output=True, text=True, env=e)
    assert r.returncode == 0, r.stderr
    for name, data in files.items():
        digest = hashlib.sha256(data).hexdigest()
        assert (repo_dir(env, "org/odd") / "blobs" / digest).read_bytes() == data
    hub.add("org/odd2", files)
    hub.corrupt = True
    r = subprocess.run([sys.executable, "-c", code.replace("org/odd", "org/odd2"), str(sizes[-1])], capture_output=True,
                       text=True, env=e)
    assert r.returncode != 0 and "SHA-256" in r.stderr, r.stderr


@pytest.mark.parametrize("offline", [False, True])
def test_verify_checks_the_cached_snapshot_against_the_hubs_hashes(hub, env, model, tmp_path, offline):
    files, sd = model
    r, _ = load(env, tmp_path)
    assert r.returncode == 0, r.stderr
    e = dict(env, **({"HF_HUB_OFFLINE": "1"} if offline else {}))
    r = ckpt(e, "verify", "hf://org/model")
    assert r.returncode == 0, r.stderr
    shards = sum(n.endswith(".safetensors") for n in files)
    assert f"the SHA-256 of {shards} files" in r.stdout, r.stdout
    name = "model-00002-of-00004.safetensors"
    blob = repo_dir(env) / "blobs" / hashlib.sha256(files[name]).hexdigest()
    data = bytearray(blob.read_bytes())
    data[-5] ^= 1  # one bit of the last tensor: the structure still opens
    os.chmod(blob, 0o644)
    blob.write_bytes(bytes(data))
    r = ckpt(e, "verify", "hf://org/model")
    assert r.returncode != 0 and name in r.stderr and "SHA-256" in r.stderr, r.stderr


@pytest.mark.parametrize("name", ["hf://../x", "hf://org/..", "hf://org/model/../../etc/passwd", "hf://org/model//x",
                                  "hf://org", "hf://org/model@/x"])
def test_names_that_leave_the_repo_are_refused(hub, env, name):
    r = ckpt(env, "inspect", name)
    assert r.returncode != 0 and "INVALID_ARGUMENT" in r.stderr, r.stderr
    assert hub.requests == []


def test_a_link_planted_in_the_cache_is_not_followed(hub, env, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    repo = repo_dir(env)
    repo.mkdir(parents=True)
    (repo / "blobs").symlink_to(outside)
    r, _ = load(env, tmp_path)
    assert r.returncode != 0 and "Hub's cache" in r.stderr, r.stderr
    assert list(outside.iterdir()) == []


STREAMED = """
import json, sys, time, torch, ckpt, safetensors
def rchar():
    return int(next(l for l in open('/proc/self/io') if l.startswith('rchar')).split()[1])
name = sys.argv[1]
with safetensors.safe_open(sys.argv[2], 'pt') as f:  # the shard, for the targets' shapes
    target = {k: torch.empty_like(f.get_tensor(k)) for k in f.keys()}
first = []
before = rchar()
ckpt.load_into(target, name, on_loaded=lambda n, t: first.append(time.monotonic()))
print(json.dumps({"first": min(first), "rchar": rchar() - before,
                  "sums": {k: float(v.double().sum()) for k, v in target.items()}}))
"""


def test_a_file_streams_into_the_model_as_it_downloads(hub, env, model, tmp_path):
    """One pass from the Hub into the tensors: with a CDN that sends the file
    in 64 KiB runs 20 ms apart, the first tensor is in place before the
    last byte is sent, the file's bytes are sent once, and the load reads
    (almost) nothing from disk: the download's bytes go straight into the
    targets, not into the cache and back.  The cache entry is whole and
    huggingface_hub reads it offline."""
    files, sd = model
    name = "model-00001-of-00004.safetensors"
    data = files[name]
    digest = hashlib.sha256(data).hexdigest()
    shard = tmp_path / name
    shard.write_bytes(data)
    hub.throttle = (64 << 10, 0.02)
    r = subprocess.run([sys.executable, "-c", STREAMED, f"hf://org/model/{name}", str(shard)], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    import safetensors.torch as st
    want = st.load_file(shard)
    assert got["sums"] == {k: float(v.double().sum()) for k, v in want.items()}
    cdn = f"/cdn/{digest}"
    assert got["first"] < hub.finished[cdn], (got["first"], hub.finished[cdn])
    served = sum(q[4] for q in hub.requests if q[1] == cdn)
    assert len(data) <= served < len(data) + (64 << 10), (served, hub.requests)
    assert got["rchar"] < len(data) // 4, got["rchar"]  # not read back from the cache: 5 MB before
    assert (repo_dir(env) / "blobs" / digest).read_bytes() == data
    out = py(dict(env, HF_HUB_OFFLINE="1"), f"from huggingface_hub import hf_hub_download as d; print(d('org/model', '{name}'))")
    assert Path(out.strip()).read_bytes() == data


def test_a_connection_that_keeps_dropping_mid_file_fails_and_commits_nothing(hub, env, model, tmp_path):
    files, sd = model
    hub.cut_at = 3_000_000  # every body of an LFS file ends there: the resumed ones get nothing
    r, _ = load(env, tmp_path)
    assert r.returncode != 0
    sha = hub.repos["org/model"].branches["main"]
    assert f"@{sha}/model-0000" in r.stderr, r.stderr
    blobs = [p.name for p in (repo_dir(env) / "blobs").iterdir()]
    assert not [b for b in blobs if len(b) == 64], blobs  # no LFS blob under its name
    snap = repo_dir(env) / "snapshots" / sha
    assert not [p for p in snap.iterdir() if p.name.endswith(".safetensors")] if snap.exists() else True


AGAIN = """
import sys, ckpt
from ckpt import _api
ck = ckpt.open(sys.argv[1], framework="pt")
names = list(ck.keys())
def run(cancel):
    plan = _api._build_plan(ck._catalog, ck._catalog.tensors())
    plan.load(threads=1, views=0, item_done=(lambda i: True) if cancel else None, check_crc=True)
try:
    run(sys.argv[2] == "cancel")
    print("first ok", flush=True)
except Exception as e:
    print("first failed:", e, flush=True)
sys.stdin.readline()
print(names[-1], float(ck[names[-1]].double().sum()), flush=True)
"""


@pytest.mark.parametrize("how", ["cancel", "cut"])
def test_a_failed_load_leaves_the_open_checkpoint_readable(hub, env, model, tmp_path, how):
    """A load that fails while the file downloads (cancelled, as Ctrl-C
    does, or the connection dropping for good) stops its download; the
    checkpoint stays open, and a later read of it resumes the download and
    gets its bytes, not the failed run's error again."""
    files, _ = model
    name = "model-00001-of-00004.safetensors"
    import safetensors.torch as st
    want = st.load(files[name])
    hub.throttle = (64 << 10, 0.01)  # still downloading when the first tensor is in
    if how == "cut":
        hub.cut_at = 2_000_000
    p = subprocess.Popen([sys.executable, "-c", AGAIN, f"hf://org/model/{name}", how], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    first = p.stdout.readline()
    assert first.startswith("first failed"), (first, p.stderr.read() if p.poll() is not None else "")
    hub.cut_at, hub.throttle = None, None
    out, errs = p.communicate("\n", timeout=120)
    assert p.returncode == 0, errs
    tensor, total = out.split()
    assert float(total) == float(want[tensor].double().sum()), out
    digest = hashlib.sha256(files[name]).hexdigest()
    assert (repo_dir(env) / "blobs" / digest).read_bytes() == files[name]



SLOW_READER = """
import sys, time, torch, ckpt, safetensors
with safetensors.safe_open(sys.argv[2], 'pt') as f:
    target = {k: torch.empty_like(f.get_tensor(k)) for k in f.keys()}
ckpt.load_into(target, sys.argv[1], threads=1, on_loaded=lambda n, t: time.sleep(0.25), min_speed=8_000_000,
               min_speed_time=1, retries=1)
print(sum(float(v.double().sum()) for v in target.values()))
"""


def test_a_download_paced_by_a_slow_load_is_not_slower_than_the_minimum_speed(hub, env, tmp_path):
    """The download waits for the load's reads (pacing, hf_stream.c): the
    time it is held by a load slower than the network is not the server's,
    so a minimum speed the server keeps is never missed because of it (no
    attempt cut as too slow, no second request), nor at the file's end,
    where a retry would ask for the empty range past it."""
    import safetensors.torch as st
    g = torch.Generator().manual_seed(2)
    data = st.save({f"t{i:02}": torch.randn(512, 512, generator=g) for i in range(32)})  # 32 MiB: past socket buffers
    hub.add("org/big", {"big.safetensors": data})
    shard = tmp_path / "big.safetensors"
    shard.write_bytes(data)
    r = subprocess.run([sys.executable, "-c", SLOW_READER, "hf://org/big/big.safetensors", str(shard)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    digest = hashlib.sha256(data).hexdigest()
    whole = [q for q in hub.requests if q[1] == f"/cdn/{digest}" and not (q[2] or "").endswith("-16383")]
    assert len(whole) == 1, hub.requests


def test_bytes_read_before_the_server_starts_over_are_not_trusted(hub, env, model, tmp_path):
    """A download whose retry the server answers from byte 0 (HTTP 200)
    starts over, and its SHA-256 then covers only the bytes sent again:
    bytes the load already took from the first answer were never checked
    (here one of them was flipped).  The load must not succeed on them;
    the checked copy is in the cache, and the next load gets it right."""
    files, sd = model
    name = "model-00001-of-00004.safetensors"
    hub.flip_once = 500_000  # in the first tensor, which is read before the cut
    hub.drop_after, hub.drop_times = 2_000_000, 1
    hub.whole_on_resume = True
    r, got = load(env, tmp_path, f"hf://org/model/{name}")
    want = {k: v for k, v in sd.items() if k in (got or {})}
    assert r.returncode != 0 or same_dict(got, want), "the load succeeded on bytes no SHA-256 checked"
    assert r.returncode != 0 and "SHA-256" in r.stderr, r.stderr
    digest = hashlib.sha256(files[name]).hexdigest()
    assert (repo_dir(env) / "blobs" / digest).read_bytes() == files[name]
    r, got = load(env, tmp_path, f"hf://org/model/{name}")
    assert r.returncode == 0, r.stderr
    assert same_dict(got, {k: v for k, v in sd.items() if k in got}) and len(got) > 3


CANCEL_FIRST = """
import sys, time, ckpt
start = time.monotonic()
try:
    from ckpt import _api
    ck = ckpt.open(sys.argv[1], framework="pt")
    plan = _api._build_plan(ck._catalog, ck._catalog.tensors())
    plan.load(threads=1, views=0, item_done=lambda i: True, check_crc=True)
except Exception as e:
    print(time.monotonic() - start, type(e).__name__)
"""


def test_a_cancelled_load_stops_a_stalled_download_at_once(hub, env, model, tmp_path):
    """A load cancelled (Ctrl-C) while the server stalls mid-file returns
    at once: the download it stops is not waited for until the server
    sends again (or the read timeout, a minute, passes)."""
    files, _ = model
    name = "model-00001-of-00004.safetensors"
    data = files[name]
    header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])
    first = min(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    hub.throttle = (8 + int.from_bytes(data[:8], "little") + first, 30)  # the first tensor, then 30 s of nothing
    r = subprocess.run([sys.executable, "-c", CANCEL_FIRST, f"hf://org/model/{name}"], capture_output=True,
                       text=True, env=env, timeout=120)
    took, kind = r.stdout.split()
    assert kind == "CancelledError", r.stdout + r.stderr
    assert float(took) < 10, took


# ---- torch.distributed.checkpoint over hf:// ---------------------------------------------------

DCP_SAVE = r"""
import sys, torch, torch.distributed as dist, torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (2,))
g = torch.Generator().manual_seed(3)
sd = {"step": 7}
for i in range(int(sys.argv[2])):
    sd[f"layers.{i}.w"] = distribute_tensor(torch.randn(64, 48, generator=g), mesh, [Shard(0)])
    sd[f"layers.{i}.b"] = distribute_tensor(torch.randn(48, generator=g).to(torch.bfloat16), mesh, [Replicate()])
    sd[f"layers.{i}.v"] = distribute_tensor(torch.randn(32, 40, generator=g), mesh, [Shard(1)])
dcp.save(sd, checkpoint_id=sys.argv[1])
dist.destroy_process_group()
"""


def dcp_checkpoint(out, layers):
    """A DCP that dcp.save wrote on 2 gloo ranks (DTensors sharded by rows,
    by columns, and replicated), as {path: bytes}, and what torch's own
    dcp_to_torch_save makes of it."""
    import socket
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    ranks = [subprocess.Popen([sys.executable, "-c", DCP_SAVE, str(out), str(layers)], env=dict(e, RANK=str(r)),
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    errors = [p.communicate(timeout=300)[1] for p in ranks]
    assert all(p.returncode == 0 for p in ranks), errors
    dcp_to_torch_save(out, out.parent / "reference.pt")
    want = {k: v for k, v in torch.load(out.parent / "reference.pt").items() if isinstance(v, torch.Tensor)}
    return {p.name: p.read_bytes() for p in out.iterdir()}, want


@pytest.fixture(scope="module")
def dcp_model(tmp_path_factory):
    return dcp_checkpoint(tmp_path_factory.mktemp("dcp") / "ckpt", layers=20)


def test_a_dcp_metadata_that_fails_its_sha256_is_refused(hub, env, dcp_model, tmp_path):
    """A DCP's .metadata stored in LFS (as the Hub stores a large one) is
    checked against the Hub's SHA-256 like any LFS file, although it is
    read whole and closed before the open ends: a copy that went wrong
    fails the open naming .metadata and the revision; a good one loads as
    torch reads it."""
    files, want = dcp_model
    meta = files[".metadata"]
    assert len(meta) > 16 << 10  # past the first bytes an open asks for: read from the download
    hub.lfs_paths = {".metadata"}
    sha = hub.add("org/dcp", files).branches["main"]
    hub.flip_once = len(meta) - 200
    r, _ = load(env, tmp_path, "hf://org/dcp")
    assert r.returncode != 0, "the open succeeded on a .metadata no SHA-256 checked"
    assert ".metadata" in r.stderr and "SHA-256" in r.stderr and sha in r.stderr, r.stderr
    assert hub.flip_once is None  # the flip went out
    r, got = load(env, tmp_path, "hf://org/dcp")
    assert r.returncode == 0, r.stderr
    assert list(got) == list(want) and same_dict(got, want)


def test_a_small_lfs_file_that_fails_its_sha256_is_refused(hub, env, tmp_path):
    """An LFS file small enough to come whole with the first bytes an open
    asks for (a small DCP's files) is checked as it goes into the cache:
    bytes that fail the Hub's SHA-256 are refused, naming the file and the
    revision, not served from those first bytes unchecked."""
    import torch.distributed.checkpoint as dcp
    want = {"a": torch.randn(8, 8, generator=torch.Generator().manual_seed(3)), "b": torch.arange(5)}
    dcp.save(want, checkpoint_id=str(tmp_path / "small"), no_dist=True)
    files = {p.name: p.read_bytes() for p in (tmp_path / "small").iterdir()}
    assert all(len(b) < 16 << 10 for b in files.values())
    hub.lfs_paths = {"__0_0.distcp"}  # the one body flip_once can hit
    sha = hub.add("org/dcp", files).branches["main"]
    data = files["__0_0.distcp"]
    hub.flip_once = data.index(want["a"].numpy().tobytes()) + 10  # a byte of tensor a
    r, got = load(env, tmp_path, "hf://org/dcp")
    assert r.returncode != 0, "the load succeeded on bytes that fail the Hub's SHA-256"
    assert "__0_0.distcp" in r.stderr and "SHA-256" in r.stderr and sha in r.stderr, r.stderr
    r, got = load(env, tmp_path, "hf://org/dcp")
    assert r.returncode == 0, r.stderr
    assert same_dict(got, want)


def test_a_dcp_is_read_in_a_few_requests_a_file(hub, env, dcp_model, tmp_path):
    """A DCP opened and loaded over hf:// costs a few requests a file, not
    several a tensor: each rank's file holds a torch.save archive per
    chunk, and the small ones are read together, not each by the five or
    six reads its ZIP records take."""
    files, want = dcp_model
    assert len(want) >= 60
    hub.lfs_over = 10_000  # the .distcp files and .metadata in LFS, as a large DCP's are
    hub.add("org/dcp", files)
    hub.clear_log()
    r, got = load(env, tmp_path, "hf://org/dcp")
    assert r.returncode == 0, r.stderr
    assert list(got) == list(want) and same_dict(got, want)
    # Per file: the resolve/ redirect and the CDN's answer, for its first
    # bytes and for its download; and the API's listing.
    assert len(hub.requests) <= 4 * len(files) + 2, "\n".join(map(str, hub.requests))
