"""Files inside a checkpoint directory (docs/SECURITY.md): real checkpoints —
shards that huggingface_hub's save_torch_state_dict wrote, gguf-split parts
that the gguf package wrote, torch.distributed.checkpoint's .distcp and
.metadata, the per-rank files of its Hugging Face storage layer — with one
file replaced by a symbolic link out of the directory (to a sentinel, or to a
valid copy of itself), or by a FIFO, a socket, a device node or a directory.
Every CLI command that reads and Python's ckpt.open / load / load_into /
convert refuse with CKPT_E_UNSAFE_PATH naming the file, at once, change
nothing and create no output.  Links within the directory load, hard links
are read, and a Hugging Face cache made by huggingface_hub itself (against a
local server speaking the Hub's download protocol) keeps loading.  Names with
control characters are escaped in human output and exact in --json."""
import hashlib
import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
import reference_writers
import torch
from ckptlib import BIN_PATH
from statuses import status_of

ckpt = pytest.importorskip("ckpt")  # the Python package (installed by make test-python)

# A FIFO opened for reading blocks until a writer comes: every command runs
# under this limit, so that a hang fails the test instead of stalling it.
LIMIT = 20
SECRET = b"the sentinel outside the checkpoint\n"
STATE = {f"layer{i}.weight": torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64) + i for i in range(4)}


# ---- real checkpoints, each with the file a test will replace -------------------------------------------------------

def hub_shards(d):
    """save_torch_state_dict's shards and index: (what the user names, a shard)."""
    from huggingface_hub import save_torch_state_dict

    save_torch_state_dict(STATE, str(d), max_shard_size="20KB")
    shards = sorted(d.glob("model-*.safetensors"))
    assert len(shards) == 4
    return d, shards[1]


def gguf_split(d):
    """gguf-split parts as the gguf package writes them: (the first part, part 2)."""
    parts = reference_writers.gguf_split(d / "model.gguf", {name: t.numpy() for name, t in STATE.items()}, 2)
    assert [p.name for p in parts] == ["model-00001-of-00002.gguf", "model-00002-of-00002.gguf"]
    return parts[0], parts[1]


def dcp_save(d, **kw):
    import torch.distributed.checkpoint as dcp

    dcp.save(dict(STATE), no_dist=True, **kw)
    return d


def dcp_data(d):
    """dcp.save's directory: (the directory, its .distcp file)."""
    dcp_save(d, checkpoint_id=str(d))
    return d, d / "__0_0.distcp"


def dcp_metadata(d):
    """dcp.save's directory: (the directory, its .metadata)."""
    dcp_save(d, checkpoint_id=str(d))
    return d, d / ".metadata"


def dcp_hf_layer(d):
    """HuggingFaceStorageWriter(save_distributed=True)'s per-rank files, two
    of them (two saves of disjoint tensors): (the first file, the second)."""
    from torch.distributed.checkpoint import HuggingFaceStorageWriter
    import torch.distributed.checkpoint as dcp

    names = sorted(STATE)
    for rank, part in enumerate((names[:2], names[2:])):
        tmp = d / f"rank{rank}"
        dcp.save({k: STATE[k] for k in part}, storage_writer=HuggingFaceStorageWriter(str(tmp), save_distributed=True),
                 no_dist=True)
        (written,) = tmp.glob("*.safetensors")
        written.rename(d / f"shard-0000{rank + 1}-model-0000{rank + 1}-of-00002.safetensors")
        shutil.rmtree(tmp)
    files = sorted(d.glob("shard-*.safetensors"))
    return files[0], files[1]


KINDS = {"hub-shard": hub_shards, "gguf-part": gguf_split, "dcp-distcp": dcp_data, "dcp-metadata": dcp_metadata,
         "dcp-hf-file": dcp_hf_layer}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Each kind written once: (root, what the user names, the file to replace)."""
    out = {}
    for kind, make in KINDS.items():
        d = tmp_path_factory.mktemp(kind)
        named, victim = make(d)
        out[kind] = (d, named, victim)
    return out


@pytest.fixture
def copy_of(made, tmp_path):
    """A fresh copy of a kind's checkpoint: (directory, named, victim, outside), with a
    sentinel file beside the directory."""
    def copy(kind):
        root, named, victim = made[kind]
        d = tmp_path / "ckpt"
        shutil.copytree(root, d, symlinks=True)
        outside = tmp_path / "outside"
        outside.mkdir()
        (outside / "sentinel").write_bytes(SECRET)
        return d, d / named.relative_to(root), d / victim.relative_to(root), outside
    return copy


def run(*args, cwd=None):
    return subprocess.run([BIN_PATH, *map(str, args)], capture_output=True, text=True, timeout=LIMIT, cwd=cwd)


def snapshot(d):
    """Every entry under d: its kind, and a regular file's bytes (links not followed)."""
    out = {}
    for p in sorted(Path(d).rglob("*")):
        mode = p.lstat().st_mode
        out[str(p)] = p.read_bytes() if p.is_file() and not p.is_symlink() else (oct(mode), os.readlink(p) if p.is_symlink() else None)
    return out


def refuses_everywhere(named, victim, tmp_path, words):
    """Every reading command and Python entry point refuses with
    CKPT_E_UNSAFE_PATH naming `victim`, and creates nothing."""
    out = tmp_path / "out"
    commands = [["inspect", named], ["inspect", "--json", named], ["verify", named],
                ["convert", named, out / "o.safetensors"], ["convert", named, out / "shards", "--max-shard-size", "20KB"],
                ["convert", named, out / "o.gguf"], ["convert", named, out / "o.safetensors", "--dry-run"],
                ["diff", named, named]]
    for cmd in commands:
        r = run(*cmd)
        assert r.returncode == (2 if cmd[0] == "diff" else 1), (cmd, r.stdout, r.stderr)  # diff's trouble: 2
        assert r.stderr.count("[CKPT_E_UNSAFE_PATH]") == 1 and str(victim) in r.stderr, (cmd, r.stderr)
        assert words in r.stderr, (cmd, r.stderr)
        assert not out.exists() or not os.listdir(out), (cmd, os.listdir(out))
    calls = [lambda: ckpt.open(named), lambda: ckpt.load(named), lambda: ckpt.load(named, "np"),
             lambda: ckpt.load_into({k: torch.zeros_like(v) for k, v in STATE.items()}, named),
             lambda: ckpt.convert(named, out / "p.safetensors", progress=False)]
    for call in calls:
        with pytest.raises(ckpt.Error) as e:
            call()
        assert status_of(e.value) == "CKPT_E_UNSAFE_PATH" and e.value.path == str(victim), str(e.value)
    assert not out.exists() or not os.listdir(out)


def loads_like_the_original(named):
    got = ckpt.load(named)
    assert sorted(got) == sorted(STATE)
    assert all(torch.equal(got[k].reshape(STATE[k].shape), v) for k, v in STATE.items())
    r = run("verify", named)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("target", ["sentinel", "valid-copy", "absolute"])
def test_link_out_of_the_directory_is_refused(copy_of, tmp_path, kind, target):
    d, named, victim, outside = copy_of(kind)
    if target == "sentinel":
        link = os.path.relpath(outside / "sentinel", victim.parent)
    else:  # the file itself, moved out: valid bytes, and still refused
        moved = outside / victim.name
        victim.rename(moved)
        link = str(moved) if target == "absolute" else os.path.relpath(moved, victim.parent)
    if victim.exists():
        victim.unlink()
    victim.symlink_to(link)
    before, outside_before = snapshot(d), snapshot(outside)
    refuses_everywhere(named, victim, tmp_path, f"is a symbolic link to '{link}', which leads out")
    assert snapshot(d) == before and snapshot(outside) == outside_before
    assert (outside / "sentinel").read_bytes() == SECRET


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_link_within_the_directory_loads(copy_of, kind):
    d, named, victim, _ = copy_of(kind)
    (d / "real").mkdir()
    victim.rename(d / "real" / victim.name)
    victim.symlink_to(Path("real") / victim.name)
    loads_like_the_original(named)
    for without_openat2 in ("1", "0"):  # the component walk standing in for openat2 agrees
        r = subprocess.run([BIN_PATH, "inspect", "--json", named], capture_output=True, text=True, timeout=LIMIT,
                           env=dict(os.environ, CKPT_NO_OPENAT2=without_openat2))
        assert r.returncode == 0 and len(json.loads(r.stdout)["tensors"]) == len(STATE), r.stderr


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_link_out_refused_by_the_component_walk_too(copy_of, tmp_path, kind):
    d, named, victim, outside = copy_of(kind)
    victim.unlink()
    victim.symlink_to(os.path.relpath(outside / "sentinel", victim.parent))
    r = subprocess.run([BIN_PATH, "inspect", named], capture_output=True, text=True, timeout=LIMIT,
                       env=dict(os.environ, CKPT_NO_OPENAT2="1"))
    assert r.returncode == 1 and "[CKPT_E_UNSAFE_PATH]" in r.stderr and str(victim) in r.stderr, r.stderr


def special_file(path, kind, keep):
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        cwd = os.getcwd()
        os.chdir(path.parent)  # a socket's path has room for 107 bytes: bound by its name
        try:
            s.bind(path.name)
        finally:
            os.chdir(cwd)
        keep.append(s)
    elif kind == "device":  # /dev/null's numbers; needs root (CAP_MKNOD)
        try:
            os.mknod(path, 0o644 | 0o020000, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("mknod needs CAP_MKNOD")
    else:
        os.mkdir(path)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("special", ["fifo", "socket", "device", "directory"])
def test_special_file_in_place_of_a_file_is_refused_at_once(copy_of, tmp_path, kind, special):
    d, named, victim, _ = copy_of(kind)
    victim.unlink()
    keep = []
    special_file(victim, special, keep)
    words = {"fifo": "is a FIFO", "socket": "is a socket", "device": "is a character device",
             "directory": "is a directory"}[special]
    refuses_everywhere(named, victim, tmp_path, words)
    for s in keep:
        s.close()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_hard_link_to_a_file_outside_is_read(copy_of, kind):
    d, named, victim, outside = copy_of(kind)
    other = outside / victim.name
    victim.rename(other)
    os.link(other, victim)
    loads_like_the_original(named)


def test_user_named_link_is_followed(made, tmp_path):
    """The path the user names is theirs: a link to a checkpoint elsewhere,
    file or directory, opens (its siblings then are the link's)."""
    root, _, _ = made["hub-shard"]
    (tmp_path / "to-dir").symlink_to(root)
    loads_like_the_original(tmp_path / "to-dir")
    single = tmp_path / "single.safetensors"
    ckpt.convert(root, single, progress=False)
    (tmp_path / "link.safetensors").symlink_to(single)
    loads_like_the_original(tmp_path / "link.safetensors")


def test_convert_force_never_writes_through_a_hard_link(made, tmp_path):
    """--force replaces files by renaming new ones over them: a hard link's
    other name keeps its bytes, for a directory of shards and a single file."""
    root, named, _ = made["hub-shard"]
    out = tmp_path / "out"
    assert run("convert", named, out, "--max-shard-size", "20KB").returncode == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shard = sorted(out.glob("model-*.safetensors"))[0]
    os.link(shard, elsewhere / "shard")
    single = tmp_path / "single.safetensors"
    assert run("convert", named, single).returncode == 0
    os.link(single, elsewhere / "single")
    before = {p.name: p.read_bytes() for p in elsewhere.iterdir()}
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(8)}, str(tmp_path / "other.safetensors"))
    for cmd in (["convert", tmp_path / "other.safetensors", out, "--max-shard-size", "20KB", "--force"],
                ["convert", tmp_path / "other.safetensors", single, "--force"]):
        r = run(*cmd)
        assert r.returncode == 0, r.stderr
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before
    assert list(ckpt.load(single)) == ["x"] and list(ckpt.load(out)) == ["x"]


def test_extra_files_linked_out_are_not_copied(made, tmp_path):
    """convert of a model directory copies its other files along: one that
    links out is refused rather than copied into the output."""
    root, named, _ = made["hub-shard"]
    d = tmp_path / "model"
    shutil.copytree(root, d)
    (tmp_path / "secret").write_bytes(SECRET)
    (d / "config.json").write_text("{}")
    (d / "tokenizer.json").symlink_to("../secret")
    out = tmp_path / "out"
    r = run("convert", d, out, "--max-shard-size", "20KB")
    assert r.returncode == 1 and "[CKPT_E_UNSAFE_PATH]" in r.stderr and str(d / "tokenizer.json") in r.stderr, r.stderr
    assert not out.exists()
    (d / "tokenizer.json").unlink()
    (d / "tokenizer.json").symlink_to("config.json")  # inside: copied as the file it names
    assert run("convert", d, out, "--max-shard-size", "20KB").returncode == 0
    assert (out / "tokenizer.json").read_text() == "{}" and not (out / "tokenizer.json").is_symlink()


# ---- the Hugging Face cache, made by huggingface_hub --------------------------------------------------------------

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class HubServer:
    """The Hub's download protocol, enough for hf_hub_download: HEAD and GET
    of /{repo}/resolve/{revision}/{file}, with the commit and the ETag."""

    def __init__(self, files):
        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self):
                parts = self.path.split("?")[0].split("/")
                data = files.get("/".join(parts[5:])) if len(parts) > 5 and parts[3] == "resolve" else None
                if data is None:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.end_headers()
                    return None
                self.send_response(200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                return data

            def do_HEAD(self):
                self.answer()

            def do_GET(self):
                data = self.answer()
                if data is not None:
                    self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_port}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def hub_cache(made, tmp_path_factory):
    """A cache that hf_hub_download filled: snapshots/<commit>/ of symbolic
    links to ../../blobs/<etag>, a file in a subfolder, and one blob moved
    into the cache-wide shared store as huggingface_hub does it."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils._shared_blobs import publish_blob_to_shared_store

    root, _, _ = made["hub-shard"]
    files = {p.name: p.read_bytes() for p in root.iterdir()}
    files["config.json"] = b'{"model_type": "test"}'
    files["text_encoder/model.safetensors"] = (root / "model-00001-of-00004.safetensors").read_bytes()
    cache = tmp_path_factory.mktemp("hf-cache")
    server = HubServer(files)
    try:
        for name in files:
            path = hf_hub_download("org/model", name, cache_dir=str(cache), endpoint=server.endpoint)
    finally:
        server.close()
    snap = cache / "models--org--model" / "snapshots" / COMMIT
    assert Path(path).parent.parent == snap or Path(path).parent == snap
    for p in snap.iterdir():
        assert p.is_dir() or os.readlink(p).startswith("../../blobs/"), p
    blob = (snap / "model-00003-of-00004.safetensors").resolve()
    assert publish_blob_to_shared_store(blob_path=str(blob), xet_hash=hashlib.sha256(b"shard 3").hexdigest(),
                                        cache_dir=str(cache), expected_size=blob.stat().st_size)
    assert blob.is_symlink() and os.readlink(blob).startswith("../../blobs/")
    return snap


def test_hugging_face_cache_loads(hub_cache, tmp_path):
    for named in (hub_cache, hub_cache / "model.safetensors.index.json"):
        loads_like_the_original(named)
        for without_openat2 in ("0", "1"):
            r = subprocess.run([BIN_PATH, "inspect", named], capture_output=True, text=True, timeout=LIMIT,
                               env=dict(os.environ, CKPT_NO_OPENAT2=without_openat2))
            assert r.returncode == 0, r.stderr
    # a subfolder of the snapshot (its links climb one level more)
    assert sorted(ckpt.load(hub_cache / "text_encoder")) == ["layer0.weight"]
    # the cache's other files go along into a conversion, as files
    r = run("convert", hub_cache, tmp_path / "out", "--max-shard-size", "20KB")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "config.json").read_bytes() == b'{"model_type": "test"}'
    # named from inside the snapshot
    r = run("inspect", ".", cwd=hub_cache)
    assert r.returncode == 0, r.stderr


def test_hugging_face_cache_links_elsewhere_are_refused(hub_cache, tmp_path):
    """In a snapshot only links to the repo folder's blobs/ are followed."""
    snap = tmp_path / "cache" / "models--org--model" / "snapshots" / COMMIT
    shutil.copytree(hub_cache.parent.parent.parent, tmp_path / "cache", symlinks=True)
    (tmp_path / "secret").write_bytes(SECRET)
    victim = snap / "model-00002-of-00004.safetensors"
    for link in ("../../refs/main", "../../../../secret", "../../blobs/../../../secret"):
        victim.unlink()
        victim.symlink_to(link)
        r = run("inspect", snap)
        assert r.returncode == 1 and "[CKPT_E_UNSAFE_PATH]" in r.stderr and str(victim) in r.stderr, (link, r.stderr)
        assert "only links to the repo's blobs/ are followed" in r.stderr


# ---- names with control characters -----------------------------------------------------------------------------

def test_control_characters_in_names_are_escaped(tmp_path):
    """A tensor name, a metadata entry and a file name with a newline and an
    ESC: one line each in human output, \\n and \\x1b; exact in --json."""
    from safetensors.torch import save_file

    name = "evil\nckpt: OK\x1b[2K"
    path = tmp_path / "bad\nname\x1b.safetensors"
    save_file({name: torch.ones(2), "plain": torch.zeros(3)}, str(path), metadata={"k\x1b": "v\nw"})
    other = tmp_path / "other.safetensors"
    save_file({name: torch.zeros(2), "plain": torch.zeros(3)}, str(other))
    shown_name, shown_path = "evil\\nckpt: OK\\x1b[2K", str(path).replace("\n", "\\n").replace("\x1b", "\\x1b")
    outputs = [run("inspect", path).stdout, run("verify", path).stdout, run("diff", path, other).stdout,
               run("convert", path, tmp_path / "o.gguf", "--dry-run").stdout]
    r = run("convert", path, tmp_path / "bad\x1b.gguf", "--select", "nothing-matches")
    outputs.append(r.stderr)
    for out in outputs:
        assert "\x1b" not in out and "\nckpt: OK" not in out, out
    assert shown_name in outputs[0] and shown_path in outputs[0] and "k\\x1b: v\\nw" in outputs[0]
    assert shown_path in outputs[1] and shown_name in outputs[2] and shown_name in outputs[3]
    assert "bad\\x1b.gguf" in outputs[4] or "\\x1b" in outputs[4], outputs[4]
    got = json.loads(run("inspect", "--json", path).stdout)
    assert got["path"] == str(path) and got["metadata"] == {"k\x1b": "v\nw"}
    assert [t["name"] for t in got["tensors"]] == [name, "plain"]
    diff = json.loads(run("diff", "--json", path, other).stdout)
    assert [d["name"] for d in diff["differences"]] == [name]
