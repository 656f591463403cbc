"""ckpt.convert does llama.cpp's conversions as `ckpt convert` does them
(issue 29): a Hugging Face model directory into a .gguf is
convert_hf_to_gguf.py's file (dtype its --outtype, or llama-quantize's
mix), raw=True the plain container, and a llama.cpp GGUF into a directory
(or format="hf") a Hugging Face model directory — byte for byte the CLI's
output; what the library refuses is raised naming the file and the key,
with the CLI's own sentence, and nothing is written."""
import json
import os
import shutil
import subprocess
import sys

import pytest

import ckpt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "interop"))
from ckptlib import BIN_PATH  # noqa: E402
from test_llamacpp import tiny_llama, tokenizer  # noqa: E402


def cli(*args):
    return subprocess.run([BIN_PATH, "convert", *map(str, args), "-q"], capture_output=True, text=True)


def files(path):
    """{name: bytes} of a directory, or a file's bytes."""
    if path.is_dir():
        return {f.name: f.read_bytes() for f in sorted(path.iterdir())}
    return path.read_bytes()


@pytest.fixture(scope="module")
def llama3(tmp_path_factory):
    """A random Llama 3 of 2 layers, with Llama 3's tokenizer, as
    tests/interop/test_llamacpp.py builds it; and its F16 GGUF (ckpt's)."""
    root = tmp_path_factory.mktemp("pyconvert")
    model = root / "tiny-llama3"
    tiny_llama(model)
    tokenizer("llama3", model)
    gguf = root / "llama3-f16.gguf"
    r = cli(model, gguf, "--dtype", "f16")
    assert r.returncode == 0, r.stderr
    return model, gguf


@pytest.mark.parametrize("dtype", [None, "f32", "bf16", "q8_0", "q4_k_m", "q6_k"])
def test_model_directory_to_gguf_is_the_clis_file(llama3, tmp_path, dtype):
    model, _ = llama3
    written = ckpt.convert(model, tmp_path / "py.gguf", dtype=dtype, progress=False)
    assert written == [str(tmp_path / "py.gguf")]
    r = cli(model, tmp_path / "cli.gguf", *(["--dtype", dtype] if dtype else []))
    assert r.returncode == 0, r.stderr
    assert files(tmp_path / "py.gguf") == files(tmp_path / "cli.gguf")
    with ckpt.open(tmp_path / "py.gguf") as c:  # llama.cpp's names and key-values, not the directory's tensors
        assert "blk.0.attn_q.weight" in c and c.kv["general.architecture"] == "llama"


def test_a_torch_dtype_is_its_outtype(llama3, tmp_path):
    torch = pytest.importorskip("torch")
    model, _ = llama3
    ckpt.convert(model, tmp_path / "py.gguf", dtype=torch.bfloat16, progress=False)
    assert cli(model, tmp_path / "cli.gguf", "--dtype", "bf16").returncode == 0
    assert files(tmp_path / "py.gguf") == files(tmp_path / "cli.gguf")


@pytest.mark.parametrize("into,kept", [("py.gguf", "model.layers.0.self_attn.q_proj.weight"),
                                       ("py/", "blk.0.attn_q.weight")])
def test_raw_is_the_plain_container(llama3, tmp_path, into, kept):
    """A model directory into a GGUF, and a GGUF into a directory: the
    tensors as they are, names and all."""
    src = llama3[0] if into.endswith(".gguf") else llama3[1]
    ckpt.convert(src, tmp_path / into, raw=True, progress=False)
    assert cli(src, tmp_path / into.replace("py", "cli"), "--raw").returncode == 0
    assert files(tmp_path / into.rstrip("/")) == files(tmp_path / into.replace("py", "cli").rstrip("/"))
    with ckpt.open(tmp_path / into) as c:
        assert kept in c


@pytest.mark.parametrize("how", [{}, {"dtype": "f32"}, {"format": "hf"}, {"format": "hf", "dtype": "bf16"}])
def test_gguf_to_directory_is_the_clis_hugging_face_directory(llama3, tmp_path, how):
    _, gguf = llama3
    dst = tmp_path / ("py" if how.get("format") else "py/")
    written = ckpt.convert(gguf, dst, progress=False, **how)
    args = (["--to", "hf"] if how.get("format") else []) + (["--dtype", how["dtype"]] if "dtype" in how else [])
    r = cli(gguf, tmp_path / ("cli" if how.get("format") else "cli/"), *args)
    assert r.returncode == 0, r.stderr
    assert files(tmp_path / "py") == files(tmp_path / "cli")
    assert sorted(os.path.basename(f) for f in written) == ["config.json", "model.safetensors", "tokenizer.json",
                                                            "tokenizer_config.json"]
    assert json.loads((tmp_path / "py" / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]


def test_dry_run_lists_llama_cpps_names(llama3, tmp_path):
    model, _ = llama3
    preview = ckpt.convert(model, tmp_path / "m.gguf", dtype="q8_0", dry_run=True)
    assert not (tmp_path / "m.gguf").exists()
    names = {t["name"]: t for t in preview["tensors"]}
    assert names["blk.0.attn_q.weight"]["dtype"] == "Q8_0"
    assert names["blk.0.attn_q.weight"]["source"] == "model.layers.0.self_attn.q_proj.weight"


def refused_alike(src, dst, tmp_path, cli_args, **kw):
    """ckpt.convert raises ckpt.Error with the CLI's sentence; neither
    writes anything."""
    with pytest.raises(ckpt.Error) as e:
        ckpt.convert(src, dst, progress=False, **kw)
    r = cli(src, dst, *cli_args)
    assert r.returncode != 0
    assert f"{e.value}" in r.stderr
    assert not os.path.exists(dst)
    return e.value


def test_a_missing_tokenizer_names_the_file(llama3, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(llama3[0], model)
    os.remove(model / "tokenizer.json")
    err = refused_alike(model, tmp_path / "out.gguf", tmp_path, [])
    assert "tokenizer.json" in str(err) and isinstance(err, FileNotFoundError)


def test_a_contradicting_config_key_is_named(llama3, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(llama3[0], model)
    config = json.loads((model / "config.json").read_text())
    config["hidden_size"] = 48
    (model / "config.json").write_text(json.dumps(config))
    err = refused_alike(model, tmp_path / "out.gguf", tmp_path, ["--dtype", "q8_0"], dtype="q8_0")
    assert err.path and "hidden_size" in str(err)


def test_an_unknown_mix_is_refused_by_the_library(llama3, tmp_path):
    err = refused_alike(llama3[0], tmp_path / "out.gguf", tmp_path, ["--dtype", "q4_0"], dtype="q4_0")
    assert err.detail == "CKPT_D_UNSUPPORTED_DTYPE" and "q4_0" in str(err)


def test_a_gguf_of_no_llama_cpp_model_to_hf_names_the_key(llama3, tmp_path):
    plain = tmp_path / "plain.gguf"
    ckpt.convert(llama3[0], plain, raw=True, progress=False)  # no general.architecture
    err = refused_alike(plain, tmp_path / "out", tmp_path, ["--to", "hf"], format="hf")
    assert err.path == str(plain) and "general.architecture" in str(err)


@pytest.mark.parametrize("kw", [{"select": "*"}, {"rename": {"model.": ""}}, {"dtype": {"*": "f16"}},
                                {"source_metadata": True}])
def test_other_rules_are_refused_as_the_cli_refuses_them(llama3, tmp_path, kw):
    with pytest.raises(ValueError, match="raw=True"):
        ckpt.convert(llama3[0], tmp_path / "out.gguf", progress=False, **kw)
    with pytest.raises(ValueError, match="raw=True"):
        ckpt.convert(llama3[1], tmp_path / "out/", progress=False, **{k: v for k, v in kw.items()
                                                                       if k != "source_metadata"} or {"select": "*"})
    assert not os.path.exists(tmp_path / "out.gguf") and not os.path.exists(tmp_path / "out")


def test_format_hf_needs_a_gguf_and_raw_a_gguf_output(llama3, tmp_path):
    with pytest.raises(ValueError, match="GGUF"):
        ckpt.convert(llama3[0], tmp_path / "out", format="hf")
    with pytest.raises(ValueError, match="raw=True"):
        ckpt.convert(llama3[0], tmp_path / "out.safetensors", raw=True)
