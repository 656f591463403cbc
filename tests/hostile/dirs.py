"""Hostile checkpoint directories (issue 26), built at test time: FIFOs,
sockets, device nodes and hard links cannot be committed to git.

    peers = build_peers(tmp / "peers", ckpt_bin)   # once: real checkpoints
    built = build(CASES["shard-fifo"], tmp / "case", peers)

Every case is a folder `root` holding

    root/parent.txt, root/.profile          sentinels in the folder above the checkpoint
    root/home/secret.txt, home/.ssh/id_rsa  a sibling "home" with the user's files
    root/outside/                           the targets of every symlink a case plants
    root/model/                             the checkpoint directory
    root/model/notes.txt                    a file of the user's that ckpt never wrote

and the attack the case is named after.  The checkpoints are written by the
real peers: safetensors, huggingface_hub.save_torch_state_dict (two shards
and an index), torch.save, torch.distributed.checkpoint.save (one
process), gguf's GGUFWriter (split parts), and the genuine interrupted
commit is the state a `ckpt convert --force` killed right after writing its
journal leaves (as tests/cli/test_crash.py kills it, at a chosen moment).
Each case also says what the contract (/work/plan/CONTRACT.md, issue 26)
wants of reads, writes and recovery; tests/cli/test_hostile_dirs.py runs
every command on every case and checks that nothing outside the checkpoint
changed."""
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import safetensors.numpy

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the reference writers
import reference_writers  # noqa: E402

JOURNAL = ".ckpt-commit.json"
UNSAFE = "CKPT_E_UNSAFE_PATH"
INCOMPLETE = "CKPT_E_INCOMPLETE"
SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"
INDEX = "model.safetensors.index.json"
PART1 = "m-00001-of-00002.gguf"
PART2 = "m-00002-of-00002.gguf"
DISTCP = "__0_0.distcp"
ESC = "\x1b[2J"
CONTROL_NAMES = ("evil\nname.weight", ESC + "clear.weight")
NAMED = ("embed.weight",) + CONTROL_NAMES + ("head.bias",)  # the names case's tensors


def tensors(offset=0.0, names=None):
    """The test model: four small float32 tensors (two shards of the hub's
    at max_shard_size=600); `offset` makes a second, different version."""
    shapes = {"embed.weight": (16, 8), "layers.0.weight": (8, 8), "layers.1.weight": (8, 8), "head.bias": (8,)}
    out = {}
    for i, (name, shape) in enumerate(shapes.items()):
        n = int(np.prod(shape))
        out[name] = (np.arange(n, dtype=np.float32).reshape(shape) * (i + 1) + offset).astype(np.float32)
    if names:
        out = {new: out[old] for old, new in zip(list(out), names)}
    return out


# ---- the outcomes the contract asks for --------------------------------------------


@dataclass(frozen=True)
class Ok:
    """Succeeds.  `journal_warning`: inspect and verify print one warning
    line naming the journal they leave alone (an invalid journal)."""
    journal_warning: bool = False


@dataclass(frozen=True)
class Refused:
    """Fails with this status: the CLI on exactly one stderr line (exit 1)
    holding `[status]` and each of `words`; Python with ckpt.Error whose
    .status is it (and the words, "ckpt recover" read as "ckpt.recover").
    status None: any status; a tuple: any of them.  names_dir: the message
    names the checkpoint's directory."""
    status: object = None
    words: tuple = ()
    names_dir: bool = False

    def statuses(self):
        return () if self.status is None else (self.status,) if isinstance(self.status, str) else self.status


@dataclass(frozen=True)
class Either:
    """Succeeds or is refused (one clear line, any status): what the
    contract leaves open, e.g. a writer meeting a directory where its output
    file goes.  Still: no crash, no hang, nothing outside changed."""


# ---- peers: real checkpoints, built once --------------------------------------------


SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <string.h>
/* kill -9 at the moment a ckpt commit is decided: right after its journal
 * is renamed into place, before any of it is carried out. */
static void decided(int r, const char *to) {
    const char *j = "/.ckpt-commit.json";
    size_t n = strlen(to), k = strlen(j);
    if (r == 0 && (!strcmp(to, j + 1) || (n >= k && !strcmp(to + n - k, j)))) raise(SIGKILL);
}
int rename(const char *from, const char *to) {
    int (*real)(const char *, const char *) = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    int r = real(from, to);
    decided(r, to);
    return r;
}
int renameat(int a, const char *from, int b, const char *to) {
    int (*real)(int, const char *, int, const char *) =
        (int (*)(int, const char *, int, const char *))dlsym(RTLD_NEXT, "renameat");
    int r = real(a, from, b, to);
    decided(r, to);
    return r;
}
int renameat2(int a, const char *from, int b, const char *to, unsigned flags) {
    int (*real)(int, const char *, int, const char *, unsigned) =
        (int (*)(int, const char *, int, const char *, unsigned))dlsym(RTLD_NEXT, "renameat2");
    int r = real(a, from, b, to, flags);
    decided(r, to);
    return r;
}
"""


@dataclass
class Peers:
    root: Path
    ref: Path          # tensors() as one safetensors file
    ref2: Path         # tensors(100): what the writes write
    names_ref: Path    # the names case's tensors (NAMED)


def _interrupted_commit(dst, src, ckpt_bin, work):
    """`ckpt convert SRC DST --force` killed -9 once its journal is in
    place: the state a crash at that moment leaves."""
    shim_c = work / "kill_at_journal.c"
    shim = work / "kill_at_journal.so"
    shim_c.write_text(SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(shim), str(shim_c), "-ldl"], check=True)
    r = subprocess.run([ckpt_bin, "convert", str(src), str(dst), "--force", "-q", "--no-progress"],
                       env={**os.environ, "LD_PRELOAD": str(shim), "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == -9, f"the writer was not stopped at its journal: rc {r.returncode} {r.stderr}"
    assert (dst / JOURNAL).is_file(), sorted(os.listdir(dst))


def build_peers(out, ckpt_bin):
    import torch
    import torch.distributed.checkpoint as dcp
    from huggingface_hub import save_torch_state_dict

    out = Path(out)
    out.mkdir(parents=True)
    base = tensors()
    p = Peers(out, out / "ref.safetensors", out / "ref2.safetensors", out / "names-ref.safetensors")
    safetensors.numpy.save_file(base, str(p.ref))
    safetensors.numpy.save_file(tensors(100), str(p.ref2))
    safetensors.numpy.save_file(tensors(names=NAMED), str(p.names_ref))
    sd = {k: torch.from_numpy(v.copy()) for k, v in base.items()}

    # Hugging Face: two shards and the index, as the hub writes them, beside a config.json
    (out / "hf").mkdir()
    save_torch_state_dict(sd, str(out / "hf"), max_shard_size=600)
    assert sorted(os.listdir(out / "hf")) == [SHARD1, SHARD2, INDEX], os.listdir(out / "hf")
    (out / "hf" / "config.json").write_text('{"model_type": "test"}\n')
    # one safetensors file; one torch.save file
    (out / "st").mkdir()
    shutil.copyfile(p.ref, out / "st" / "model.safetensors")
    (out / "pt").mkdir()
    torch.save(sd, out / "pt" / "pytorch_model.bin")
    # torch.distributed.checkpoint, one process
    with warnings.catch_warnings():  # "assuming the intent is to save in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(sd, checkpoint_id=str(out / "dcp"))
    assert sorted(os.listdir(out / "dcp")) == [".metadata", DISTCP], os.listdir(out / "dcp")
    # gguf-split parts, as GGUFWriter splits them
    (out / "gguf").mkdir()
    reference_writers.gguf_split(out / "gguf" / "m.gguf", base, 2)
    assert sorted(os.listdir(out / "gguf")) == [PART1, PART2], os.listdir(out / "gguf")
    # names with a newline and an escape sequence: tensors and shard files
    names = out / "names"
    names.mkdir()
    named = tensors(names=NAMED)
    shard_files = ("model-" + ESC + "-00001.safetensors", "model-\n-00002.safetensors")
    weight_map = {}
    for i, group in enumerate((list(named)[:2], list(named)[2:])):
        safetensors.numpy.save_file({k: named[k] for k in group}, str(names / shard_files[i]))
        weight_map.update({k: shard_files[i] for k in group})
    (names / INDEX).write_text(json.dumps({"metadata": {"total_size": sum(a.nbytes for a in named.values())},
                                           "weight_map": weight_map}, indent=2))
    # the genuine interrupted commit: the hub's checkpoint being replaced by ref2
    shutil.copytree(out / "hf", out / "genuine", symlinks=True)
    _interrupted_commit(out / "genuine", p.ref2, ckpt_bin, out)
    return p


# ---- journals ------------------------------------------------------------------------


def read_journal(path):
    """The NUL-terminated fields (src/io/commit.c): "ckpt-commit-1" "stage"
    NAME ("remove" NAME)* ("publish" NAME)* "end"."""
    data = Path(path).read_bytes()
    assert data.endswith(b"\0"), data
    return [f.decode() for f in data[:-1].split(b"\0")]


def journal_bytes(fields):
    return b"".join(f.encode() + b"\0" for f in fields)


def stage_name(fields):
    return fields[2]


def entries(fields, kind):
    return [fields[i + 1] for i in range(3, len(fields) - 1, 2) if fields[i] == kind]


# ---- building a case ------------------------------------------------------------------


@dataclass
class Built:
    root: Path          # everything under it, but `inside`, must stay as it was
    path: str           # what the user names
    dir: Path           # the checkpoint's directory as the user names it (writes go there)
    inside: Path        # the checkpoint's directory itself (its real path)
    out: Path           # where outputs of reads go (not under root)
    user_files: tuple   # files inside the checkpoint no write may change


@dataclass
class Ctx:
    root: Path
    model: Path
    outside: Path
    peers: Peers
    named: str = None   # overrides what the user names
    named_dir: Path = None
    inside: Path = None

    def journal(self):
        return read_journal(self.model / JOURNAL)

    def write_journal(self, fields):
        (self.model / JOURNAL).write_bytes(journal_bytes(fields))

    def stage(self):
        return self.model / stage_name(self.journal())


def _sentinels(root):
    (root / "parent.txt").write_text("the folder above the checkpoint: must stay\n")
    (root / ".profile").write_text("export PATH=$HOME/bin:$PATH\n")
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / "secret.txt").write_text("the user's secret: must never move, change or be read into a checkpoint\n")
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nnot a real key\n")
    os.chmod(home / ".ssh" / "id_rsa", 0o600)
    os.symlink("secret.txt", home / "secret-link")
    (root / "outside").mkdir()
    (root / "outside" / "sentinel.txt").write_text("outside the checkpoint\n")


def fifo(path):
    os.mkfifo(path)


def unix_socket(path):
    """A bound socket's file (bound in a short folder: sun_path is 108
    bytes), moved into place."""
    short = tempfile.mkdtemp(prefix="ckpt-sock-")
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(os.path.join(short, "s"))
        s.close()
        os.rename(os.path.join(short, "s"), path)
    finally:
        shutil.rmtree(short)


def char_device(path):
    """A /dev/null-like node (c 1 3): reading it gives nothing, forever
    "successfully"."""
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))


def replace(path, make):
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    make(path)


def link_out(ctx, name, target_name=None, copy=True):
    """Moves the checkpoint's file `name` outside (or writes a sentinel
    there) and leaves a symlink to it in its place."""
    src = ctx.model / name
    target = ctx.outside / (target_name or Path(name).name)
    if copy:
        shutil.move(src, target)
    else:
        target.write_text("a sentinel, not a checkpoint\n")
        src.unlink()
    os.symlink(target, src)
    return target


def build(case, root, peers):
    """Builds `case` in the new folder `root` (its outputs go to
    root.parent / (root.name + "-out"))."""
    root = Path(root)
    root.mkdir(parents=True)
    _sentinels(root)
    model = root / "model"
    shutil.copytree(peers.root / case.base, model, symlinks=True)
    (model / "notes.txt").write_text("the user's notes: ckpt never wrote this file\n")
    ctx = Ctx(root, model, root / "outside", peers)
    if case.mutate:
        case.mutate(ctx)
    directory = ctx.named_dir or ctx.model
    path = ctx.named or (str(directory / case.entry) if case.entry else str(directory))
    out = root.parent / (root.name + "-out")
    out.mkdir()
    inside = ctx.inside or ctx.model
    user_files = tuple(n for n in ("notes.txt", "config.json") if os.path.lexists(inside / n))
    return Built(root, path, Path(directory), inside, out, user_files)


# ---- snapshots ---------------------------------------------------------------------------


def snapshot(top, exclude=None):
    """{relative path: (type, mode, contents or link target)} of everything
    under `top`, links not followed, `exclude` (a folder) left out."""
    top = Path(top)
    out = {}
    stack = [top]
    while stack:
        d = stack.pop()
        for e in os.scandir(d):
            p = Path(e.path)
            if exclude is not None and p == exclude:
                continue
            st = os.lstat(p)
            rel = str(p.relative_to(top))
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", mode)
                stack.append(p)
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", mode, p.read_bytes())
            elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                out[rel] = ("device", mode, st.st_rdev)
            else:
                out[rel] = (stat.S_IFMT(st.st_mode), mode)
    return out


# ---- the cases ---------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    base: str                 # the peer copied into root/model
    mutate: object = None     # fn(ctx): the attack
    entry: str = None         # the file the user names inside the directory (None: the directory)
    reads: object = Ok()      # inspect, verify, diff, convert from it, ckpt.open/load/load_into/convert
    writes: object = Ok()     # convert into the directory --force, ckpt.save(overwrite=True)
    recover: object = None    # ckpt recover / ckpt.recover (journal cases only)
    kind: str = "hf"          # what a write into the directory writes: hf, dcp, gguf
    ref: str = "ref"          # the peer file holding the same tensors
    ops: dict = field(default_factory=dict)  # outcomes of single operations, over reads/writes
    doc: str = ""


def _planted_stage(name):
    """The issue's planted journal: a stage and nothing else."""
    def mutate(ctx):
        ctx.write_journal(["ckpt-commit-1", "stage", name, "end"])
    return mutate


def _stage_symlink(ctx):
    """The stage, the same name, is a symlink to a folder outside holding
    the staged files and a sentinel."""
    stash = ctx.outside / "stash"
    shutil.move(ctx.stage(), stash)
    (stash / "sentinel.txt").write_text("in the symlinked stage's target: must stay\n")
    os.symlink(stash, ctx.model / stage_name(ctx.journal()))


def _stage_regular_file(ctx):
    stage = ctx.stage()
    shutil.rmtree(stage)
    stage.write_text("a regular file where the stage should be\n")


def _stage_other_name(ctx):
    fields = ctx.journal()
    os.rename(ctx.stage(), ctx.model / "stage")
    fields[2] = "stage"
    ctx.write_journal(fields)


def _add_entry(kind, name_of):
    def mutate(ctx):
        fields = ctx.journal()
        at = 3 if kind == "remove" else len(fields) - 1
        fields[at:at] = [kind, name_of(ctx)]
        ctx.write_journal(fields)
    return mutate


def _publish_notes(ctx):
    (ctx.stage() / "notes.txt").write_text("the attacker's notes\n")
    _add_entry("publish", lambda c: "notes.txt")(ctx)


def _staged_file_replaced(make):
    def mutate(ctx):
        published = entries(ctx.journal(), "publish")[0]
        staged = ctx.stage() / published
        if make == "symlink":
            shutil.move(staged, ctx.outside / published)
            os.symlink(ctx.outside / published, staged)
        else:
            replace(staged, make)
    return mutate


def _truncated(ctx):
    data = (ctx.model / JOURNAL).read_bytes()
    (ctx.model / JOURNAL).write_bytes(data[:len(data) // 2])


def _no_end(ctx):
    ctx.write_journal(ctx.journal()[:-1])


def _journal_fifo(ctx):
    replace(ctx.model / JOURNAL, fifo)


def _journal_symlink_out(ctx):
    link_out(ctx, JOURNAL, "journal")


def _hf_cache(escape=None):
    """A Hugging Face cache: <hub>/models--org--name/snapshots/<rev>/ whose
    files are symlinks to ../../blobs/<hash>; the user names the snapshot.
    escape "snapshot": one file links outside the repo folder instead;
    "blob": one blob is itself a symlink out."""
    def mutate(ctx):
        repo = ctx.root / "hub" / "models--org--name"
        rev = "0123456789abcdef0123456789abcdef01234567"
        snap = repo / "snapshots" / rev
        (repo / "blobs").mkdir(parents=True)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(rev)
        snap.mkdir(parents=True)
        os.rename(ctx.model / "notes.txt", snap / "notes.txt")
        for i, name in enumerate(sorted(os.listdir(ctx.model))):
            blob = repo / "blobs" / f"{i:064x}"
            shutil.move(ctx.model / name, blob)
            os.symlink(f"../../blobs/{blob.name}", snap / name)
        ctx.model.rmdir()
        ctx.model = snap
        if escape == "snapshot":
            target = ctx.outside / SHARD1
            shutil.copyfile(snap / SHARD1, target)
            (snap / SHARD1).unlink()
            os.symlink(target, snap / SHARD1)
        elif escape == "blob":
            blob = repo / "blobs" / os.readlink(snap / SHARD1).rsplit("/", 1)[1]
            shutil.move(blob, ctx.outside / SHARD1)
            os.symlink(ctx.outside / SHARD1, blob)
    return mutate


def _named_dir_symlink(ctx):
    real = ctx.root / "real-model"
    os.rename(ctx.model, real)
    os.symlink(real, ctx.model)
    ctx.named_dir = ctx.model
    ctx.model = ctx.inside = real


def _named_file_symlink(ctx):
    os.symlink(ctx.model / "model.safetensors", ctx.root / "link.safetensors")
    ctx.named = str(ctx.root / "link.safetensors")


def _shard_inside_symlink(ctx):
    (ctx.model / "blobs").mkdir()
    shutil.move(ctx.model / SHARD1, ctx.model / "blobs" / "shard-1")
    os.symlink("blobs/shard-1", ctx.model / SHARD1)


def _hard_link(ctx):
    outside = ctx.outside / "linked.safetensors"
    os.link(ctx.model / SHARD1, outside)


def _config_symlink_out(ctx):
    (ctx.model / "config.json").unlink()
    os.symlink(ctx.root / "home" / "secret.txt", ctx.model / "config.json")


def _special(name, make):
    return lambda ctx: replace(ctx.model / name, make)


def _missing_control_shard(ctx):
    index = json.loads((ctx.model / INDEX).read_text())
    index["weight_map"]["head.bias"] = ESC + "\ngone.safetensors"
    (ctx.model / INDEX).write_text(json.dumps(index))


ignored = Ok(journal_warning=True)
incomplete = Refused(INCOMPLETE, (JOURNAL,))


def _journal_case(name, mutate, doc, base="genuine"):
    return Case(name, base, mutate, reads=ignored, writes=incomplete, recover=incomplete, doc=doc)


def _unsafe(name, base, mutate, names, doc, **kw):
    return Case(name, base, mutate, reads=Refused(UNSAFE, names), doc=doc, **kw)


_CASES = [
    # -- commit journals ------------------------------------------------------------
    Case("journal-genuine", "genuine", None, reads=Refused(INCOMPLETE, ("ckpt recover",), names_dir=True), writes=Ok(),
         recover=Ok(),
         doc="the control: a real interrupted commit, refused by reads (naming `ckpt recover`), finished by "
             "`ckpt recover`, ckpt.recover and any write into the directory"),
    _journal_case("journal-stage-dotdot", _planted_stage(".."), "stage '..': the folder above", base="hf"),
    _journal_case("journal-stage-dot", _planted_stage("."), "stage '.': the checkpoint itself", base="hf"),
    _journal_case("journal-stage-symlink", _stage_symlink,
                  "the stage (its genuine name) a symlink to a folder outside with the staged files"),
    _journal_case("journal-stage-regular-file", _stage_regular_file, "the stage a regular file"),
    _journal_case("journal-stage-other-name", _stage_other_name, "a real stage not named as ckpt names its stages"),
    _journal_case("journal-remove-notes", _add_entry("remove", lambda c: "notes.txt"), "remove the user's notes.txt"),
    _journal_case("journal-remove-absolute", _add_entry("remove", lambda c: str(c.root / "home" / "secret.txt")),
                  "remove an absolute name"),
    _journal_case("journal-remove-slash", _add_entry("remove", lambda c: "../parent.txt"), "remove a name with '/'"),
    _journal_case("journal-remove-dotdot", _add_entry("remove", lambda c: ".."), "remove '..'"),
    _journal_case("journal-publish-absolute", _add_entry("publish", lambda c: str(c.root / "home" / "secret.txt")),
                  "publish an absolute name"),
    _journal_case("journal-publish-slash", _add_entry("publish", lambda c: "../notes.txt"),
                  "publish a name with '/' (moves notes.txt up, out of the checkpoint)"),
    _journal_case("journal-publish-dotdot", _add_entry("publish", lambda c: ".."), "publish '..'"),
    _journal_case("journal-publish-notes", _publish_notes, "publish over the user's notes.txt"),
    _journal_case("journal-publish-symlink", _staged_file_replaced("symlink"),
                  "the published file in the stage a symlink to a file outside"),
    _journal_case("journal-publish-fifo", _staged_file_replaced(fifo), "the published file in the stage a FIFO"),
    _journal_case("journal-truncated", _truncated, "the journal cut in half"),
    _journal_case("journal-no-end", _no_end, "the journal without its closing \"end\""),
    _journal_case("journal-fifo", _journal_fifo, "the journal itself a FIFO"),
    _journal_case("journal-symlink-out", _journal_symlink_out,
                  "the journal a symlink to a (genuine) journal outside the checkpoint"),
    # -- symlinks -------------------------------------------------------------------
    _unsafe("shard-symlink-out", "hf", lambda c: link_out(c, SHARD1, "secret.txt", copy=False), (SHARD1,),
            "a shard the index names: a symlink to a sentinel outside"),
    _unsafe("shard-symlink-out-copy", "hf", lambda c: link_out(c, SHARD1), (SHARD1,),
            "a shard: a symlink to a valid copy of itself outside"),
    _unsafe("index-symlink-out", "hf", lambda c: link_out(c, INDEX), (INDEX,),
            "the index: a symlink to a valid copy outside"),
    Case("shard-symlink-inside", "hf", _shard_inside_symlink, doc="a shard: a symlink that stays inside (works)"),
    _unsafe("gguf-part-symlink-out", "gguf", lambda c: link_out(c, PART2), (PART2,),
            "a gguf-split part: a symlink to a valid copy outside", entry=PART1, kind="gguf"),
    _unsafe("dcp-distcp-symlink-out", "dcp", lambda c: link_out(c, DISTCP), (DISTCP,),
            "a DCP .distcp: a symlink to a valid copy outside", kind="dcp"),
    _unsafe("dcp-metadata-symlink-out", "dcp", lambda c: link_out(c, ".metadata", "metadata"), (".metadata",),
            "a DCP .metadata: a symlink to a valid copy outside", kind="dcp"),
    Case("named-dir-symlink", "hf", _named_dir_symlink, doc="the directory the user names is a symlink (works)"),
    Case("named-file-symlink", "st", _named_file_symlink, doc="the file the user names is a symlink (works)"),
    Case("hf-cache", "hf", _hf_cache(), doc="a Hugging Face cache snapshot, files linking to ../../blobs (works)"),
    _unsafe("hf-cache-snapshot-escape", "hf", _hf_cache("snapshot"), (SHARD1,),
            "a cache snapshot's file linking outside the repo folder"),
    _unsafe("hf-cache-blob-escape", "hf", _hf_cache("blob"), (SHARD1,),
            "a cache snapshot's blob itself a symlink outside"),
    Case("extra-file-symlink-out", "hf", _config_symlink_out,
         ops={op: Refused(UNSAFE, ("config.json",)) for op in ("convert-to-dir", "convert-dry-run")},
         doc="config.json a symlink to the user's secret: not copied along into a converted directory (nor "
             "listed as copied by --dry-run)"),
    # -- hard links -----------------------------------------------------------------
    Case("shard-hardlink", "hf", _hard_link,
         doc="a shard hard-linked to a file outside: read fine; a write never changes the other name"),
    # -- special files --------------------------------------------------------------
    _unsafe("shard-fifo", "hf", _special(SHARD1, fifo), (SHARD1,), "a FIFO in place of a shard"),
    _unsafe("shard-socket", "hf", _special(SHARD1, unix_socket), (SHARD1,), "a socket in place of a shard"),
    _unsafe("shard-chardev", "hf", _special(SHARD1, char_device), (SHARD1,),
            "a character device (c 1 3) in place of a shard"),
    _unsafe("shard-dir", "hf", _special(SHARD1, os.mkdir), (SHARD1,), "a directory in place of a shard",
            writes=Either()),
    _unsafe("index-fifo", "hf", _special(INDEX, fifo), (INDEX,), "a FIFO in place of the index"),
    _unsafe("single-file-fifo", "st", _special("model.safetensors", fifo), ("model.safetensors",),
            "a FIFO as the directory's one model.safetensors"),
    _unsafe("torch-file-fifo", "pt", _special("pytorch_model.bin", fifo), ("pytorch_model.bin",),
            "a FIFO as the directory's pytorch_model.bin"),
    _unsafe("gguf-part-fifo", "gguf", _special(PART2, fifo), (PART2,), "a FIFO in place of a gguf-split part",
            entry=PART1, kind="gguf"),
    _unsafe("gguf-part-dir", "gguf", _special(PART2, os.mkdir), (PART2,), "a directory in place of a gguf-split part",
            entry=PART1, kind="gguf", writes=Either()),
    _unsafe("dcp-distcp-fifo", "dcp", _special(DISTCP, fifo), (DISTCP,), "a FIFO in place of a .distcp", kind="dcp"),
    _unsafe("dcp-distcp-dir", "dcp", _special(DISTCP, os.mkdir), (DISTCP,), "a directory in place of a .distcp",
            kind="dcp", writes=Either()),
    # .metadata is recognised by its exact name, and only as a regular file: a FIFO there is no checkpoint
    Case("dcp-metadata-fifo", "dcp", _special(".metadata", fifo), reads=Refused((UNSAFE, "CKPT_E_NOT_FOUND")),
         kind="dcp", doc="a FIFO as the .metadata: refused (not opened, or opened without blocking)"),
    # -- names ----------------------------------------------------------------------
    Case("names-control", "names", ref="names_ref",
         doc="tensor and shard file names with a newline and ESC[2J: escaped in human output, exact in --json"),
    Case("names-control-missing-shard", "names", _missing_control_shard, reads=Refused(),
         doc="the index names a missing shard whose name holds ESC[2J and a newline: one escaped error line"),
]

CASES = {c.name: c for c in _CASES}
