"""ckpt's own API: catalogs and shape trees, the engine from Python
(slices, casts, renames), load_into against load_state_dict, streaming
sharded saves read by huggingface_hub and safetensors, nested round trips."""
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import safetensors.torch as st_torch
import torch

import ckpt
import ckpt.torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "interop"))
from torch_models import tiny_transformer  # noqa: E402
from statuses import status_of


def same(a, b):
    """Equal dtype, shape and bytes (NaN patterns included)."""
    def raw(t):
        return t.contiguous().reshape(-1).view(torch.uint8) if t.numel() else t
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(raw(a), raw(b))


@pytest.fixture
def llama(tmp_path):
    """A small Llama-like state dict in bf16, saved with safetensors."""
    g = torch.Generator().manual_seed(0)
    sd = {"model.embed_tokens.weight": torch.randn(50, 16, generator=g)}
    for i in range(2):
        p = f"model.layers.{i}."
        sd[p + "self_attn.q_proj.weight"] = torch.randn(16, 16, generator=g)
        sd[p + "self_attn.o_proj.weight"] = torch.randn(16, 16, generator=g)
        sd[p + "mlp.up_proj.weight"] = torch.randn(44, 16, generator=g)
        sd[p + "input_layernorm.weight"] = torch.randn(16, generator=g)
    sd = {k: v.to(torch.bfloat16) for k, v in sd.items()}
    path = tmp_path / "llama.safetensors"
    st_torch.save_file(sd, path, metadata={"format": "pt"})
    return sd, path


def test_open_catalog(llama):
    sd, path = llama
    with ckpt.open(path) as c:
        assert c.format == "safetensors" and len(c) == len(sd) and set(c.keys()) == set(sd)
        info = c.tensors["model.layers.0.mlp.up_proj.weight"]
        assert info.shape == (44, 16) and info.dtype == "BF16" and info.nbytes == 44 * 16 * 2
        assert c.metadata == {"format": "pt"}
        v = c.view("model.embed_tokens.weight")
        assert not v.flags.writeable and v.view(np.uint16).tobytes() == sd["model.embed_tokens.weight"].view(
            torch.uint16).numpy().tobytes()
        assert same(c.get("model.layers.1.input_layernorm.weight", "pt"), sd["model.layers.1.input_layernorm.weight"])
        with pytest.raises(KeyError):
            c.spec("nope")


def test_shapes_tree_without_reading(llama):
    import jax
    sd, path = llama
    tree = ckpt.shapes(path)
    leaf = tree["model"]["layers"][1]["mlp"]["up_proj"]["weight"]
    assert isinstance(leaf, jax.ShapeDtypeStruct) and leaf.shape == (44, 16) and str(leaf.dtype) == "bfloat16"
    assert isinstance(tree["model"]["layers"], list) and len(tree["model"]["layers"]) == 2
    flat = ckpt.shapes(path, nested=False)
    assert set(flat) == set(sd)


def test_shapes_of_a_torch_file_keep_its_object_tree(tmp_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 7, "pair": (1, "x")},
               tmp_path / "train.pt")
    tree = ckpt.shapes(tmp_path / "train.pt")
    assert tree["epoch"] == 7 and tree["pair"] == (1, "x")
    assert tuple(tree["model"]["weight"].shape) == (2, 3)
    assert tree["optim"]["param_groups"][0]["lr"] == 0.001
    state = tree["optim"]["state"]
    assert set(state) == {0, 1} and tuple(state[0]["exp_avg"].shape) == (2, 3)


def test_load_with_tensor_parallel_slices_casts_and_renames(llama):
    sd, path = llama
    for rank in range(3):
        got = ckpt.load(path, tp_rank=rank, tp_size=3, tp_dim=0, tp_select="*proj.weight", dtype="float32",
                        rename={"model.": ""})
        for k, v in sd.items():
            name = k[len("model."):]
            want = v.to(torch.float32)
            if k.endswith("proj.weight"):
                want = torch.tensor_split(want, 3, dim=0)[rank]
            assert same(got[name], want), (name, rank)
    got = ckpt.load(path, select="*up_proj*", slices={"*": (1, 3, 10)})
    for k in got:
        assert same(got[k], sd[k][:, 3:10])
    got = ckpt.load(path, select="model.layers.1.*", exclude="*norm*", transpose="*", framework="numpy")
    assert set(got) == {k for k in sd if k.startswith("model.layers.1.") and "norm" not in k}
    w = sd["model.layers.1.mlp.up_proj.weight"]
    assert got["model.layers.1.mlp.up_proj.weight"].view(np.uint16).tobytes() == \
        w.t().contiguous().view(torch.uint16).numpy().tobytes()


def test_load_mmap_and_nested(llama):
    sd, path = llama
    got = ckpt.load(path, mmap=True)
    assert list(got) == list(ckpt.load(path))
    assert all(same(got[k], v) for k, v in sd.items())
    opts = dict(tp_rank=1, tp_size=2, tp_select="*up_proj*", rename={"model.": ""})
    mapped, copied = ckpt.load(path, mmap=True, **opts), ckpt.load(path, **opts)
    assert list(mapped) == list(copied) and all(same(mapped[k], copied[k]) for k in copied)
    nested = ckpt.load(path, nested=True)
    assert same(nested["model"]["layers"][0]["mlp"]["up_proj"]["weight"], sd["model.layers.0.mlp.up_proj.weight"])


def test_load_progress_cancel_and_errors(llama, tmp_path):
    sd, path = llama
    seen = []
    ckpt.load(path, progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1] == sum(v.numel() * 2 for v in sd.values())

    class Stop(Exception):
        pass

    def stop(done, total):
        raise Stop()

    with pytest.raises(Stop):
        ckpt.load(path, progress=stop)
    with pytest.raises(ckpt.CancelledError):
        ckpt.load(path, progress=lambda d, t: True)
    bad = tmp_path / "trunc.safetensors"
    bad.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ckpt.SafetensorError) as e:
        ckpt.load(bad)
    assert e.value.path == str(bad) and status_of(e.value) == "CKPT_E_TRUNCATED"
    with pytest.raises(ValueError, match="tp_rank"):
        ckpt.load(path, tp_rank=3, tp_size=2)


def test_load_into_module_matches_load_state_dict(tmp_path):
    torch.manual_seed(0)
    src = tiny_transformer()  # its output head is tied to the embedding
    st_torch.save_model(src, tmp_path / "t.safetensors")  # writes the tied weight once
    torch.save(src.state_dict(), tmp_path / "t.bin")
    for path in (tmp_path / "t.safetensors", tmp_path / "t.bin"):
        ours, ref = tiny_transformer(), tiny_transformer()
        ptrs = {k: v.data_ptr() for k, v in ours.state_dict().items()}
        result = ckpt.load_into(ours, path)
        ref.load_state_dict(torch.load(tmp_path / "t.bin"))
        assert result == ckpt.LoadResult([], [], [])
        for (k, a), b in zip(ours.state_dict().items(), ref.state_dict().values()):
            assert same(a, b), k
            assert a.data_ptr() == ptrs[k], "loaded in place"


def test_load_into_on_loaded_sees_each_tensor_complete(tmp_path):
    """on_loaded(name, tensor) comes once per tensor, with its bytes all in
    place, while the others are still read (several engine threads, small
    chunks); a tensor the framework converts (int32 into int64) comes after
    its copy; an exception stops the load and is raised as it was."""
    g = torch.Generator().manual_seed(3)
    sd = {f"w{i}": torch.randn(256, 64 + i, generator=g) for i in range(12)}
    sd["ids"] = torch.arange(1000, dtype=torch.int32)
    st_torch.save_file(sd, tmp_path / "m.safetensors")
    target = {k: torch.zeros_like(v) for k, v in sd.items()}
    target["ids"] = torch.zeros(1000, dtype=torch.int64)
    seen, threads = {}, set()

    def on_loaded(name, t):
        assert t is target[name]
        seen[name] = seen.get(name, 0) + 1
        threads.add(threading.get_ident())
        assert torch.equal(t, sd[name].to(t.dtype)), name  # complete when announced

    ckpt.load_into(target, tmp_path / "m.safetensors", on_loaded=on_loaded, threads=3, progress=False)
    assert seen == {k: 1 for k in sd}
    assert all(torch.equal(target[k], sd[k].to(target[k].dtype)) for k in sd)

    def stop(name, t):
        raise KeyError(f"enough at {name}")

    with pytest.raises(KeyError, match="enough at"):
        ckpt.load_into(target, tmp_path / "m.safetensors", on_loaded=stop, progress=False)
    with pytest.raises(TypeError, match="on_loaded must be a function"):
        ckpt.load_into(target, tmp_path / "m.safetensors", on_loaded="print")


def test_a_mistyped_keyword_names_the_one_meant(tmp_path):
    """A keyword that is neither the function's own nor a source option is
    refused before anything is read, naming the closest of those."""
    path = tmp_path / "m.safetensors"
    st_torch.save_file({"w": torch.ones(3)}, path)
    target = {"w": torch.zeros(3)}
    with pytest.raises(TypeError, match=r"'on_load' \(did you mean 'on_loaded'\?\)"):
        ckpt.load_into(target, path, on_load=print)
    assert torch.equal(target["w"], torch.zeros(3))
    with pytest.raises(TypeError, match=r"'dtyp' \(did you mean 'dtype'\?\)"):
        ckpt.load(path, dtyp="float32")
    with pytest.raises(TypeError, match=r"'time_out' \(did you mean 'timeout'\?\)"):
        ckpt.open(path, time_out=5)
    with pytest.raises(TypeError, match=r"'backnd' \(did you mean 'backend'\?\)"):
        ckpt.torch.safe_open(path, "pt", backnd="pread")
    with pytest.raises(TypeError, match=r"^unexpected keyword arguments 'frobnicate', 'select_' \(did you mean 'select'\?\)$"):
        ckpt.load(path, frobnicate=1, select_=["w"])


def test_load_into_reports_and_strict(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    sd = {"0.weight": torch.randn(3, 4), "0.bias": torch.randn(3), "1.weight": torch.randn(5, 3),
          "extra": torch.zeros(1)}
    st_torch.save_file(sd, tmp_path / "m.safetensors")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError) as e:
        ckpt.load_into(model, tmp_path / "m.safetensors")
    msg = str(e.value)
    assert '"1.bias"' in msg and '"extra"' in msg and "size mismatch for 1.weight" in msg
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()), "strict failure writes nothing"
    r = ckpt.load_into(model, tmp_path / "m.safetensors", strict=False)
    assert r.missing_keys == ["1.bias"] and r.unexpected_keys == ["extra"]
    assert [m.name for m in r.mismatched_keys] == ["1.weight"]
    assert tuple(r.mismatched_keys[0].found.shape) == (5, 3) and tuple(r.mismatched_keys[0].expected.shape) == (2, 3)
    assert torch.equal(model[0].weight, sd["0.weight"]) and torch.equal(model[0].bias, sd["0.bias"])
    assert torch.equal(model[1].weight, before["1.weight"])


def test_load_into_casts_and_numpy_targets(tmp_path):
    sd = {"a": torch.randn(4, 4), "n": torch.arange(5, dtype=torch.int32), "b": torch.randn(3)}
    st_torch.save_file(sd, tmp_path / "m.safetensors")
    target = {"a": torch.zeros(4, 4, dtype=torch.bfloat16), "n": torch.zeros(5, dtype=torch.int64),
              "b": torch.zeros(6)[::2]}
    ckpt.load_into(target, tmp_path / "m.safetensors")
    assert same(target["a"], sd["a"].to(torch.bfloat16))
    assert torch.equal(target["n"], sd["n"].long()) and torch.equal(target["b"], sd["b"])
    arrays = {"a": np.zeros((4, 4), np.float32), "nested": {"n": np.zeros(5, np.int32)}}
    r = ckpt.load_into(arrays, tmp_path / "m.safetensors", strict=False, rename={"n": "nested.n"})
    assert r.unexpected_keys == ["b"] and r.missing_keys == []
    np.testing.assert_array_equal(arrays["a"], sd["a"].numpy())
    np.testing.assert_array_equal(arrays["nested"]["n"], sd["n"].numpy())


def test_save_sharded_read_by_hub_and_safetensors(tmp_path):
    from huggingface_hub import load_torch_model
    torch.manual_seed(1)
    model = tiny_transformer()
    files = ckpt.save(model, tmp_path / "out", max_shard_size="20KB", metadata={"note": "hi"})
    assert len(files) > 2 and os.path.basename(files[-1]) == "model.safetensors.index.json"
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert index["metadata"]["note"] == "hi" and index["metadata"]["total_size"] > 0
    fresh = tiny_transformer()
    load_torch_model(fresh, tmp_path / "out")
    for (k, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        assert same(a, b), k
    shard = sorted(f for f in os.listdir(tmp_path / "out") if f.endswith(".safetensors"))[0]
    with __import__("safetensors").safe_open(tmp_path / "out" / shard, "pt") as f:
        assert f.metadata() == {"format": "pt"}
    # An existing checkpoint is kept unless the caller says otherwise, with
    # the library's whole sentence in the exception's text.
    with pytest.raises(ckpt.ExistsError) as e:
        ckpt.save({"only": torch.ones(3)}, tmp_path / "out")
    text = str(e.value)
    assert "already holds a checkpoint" in text and "overwrite=True" in text and "[CKPT_E_EXISTS]" in text
    assert "Errno" not in text and str(tmp_path / "out") in text
    # Re-saved over it: old shards vanish, atomically replaced.
    ckpt.save({"only": torch.ones(3)}, tmp_path / "out", overwrite=True)
    assert sorted(os.listdir(tmp_path / "out")) == ["model.safetensors"]


def test_save_streams_strided_and_rejects_non_tensors(tmp_path):
    big = torch.arange(300 * 200, dtype=torch.float32).reshape(300, 200)
    other = big.clone()
    ckpt.save({"t": big.t(), "s": other[::3], "a": np.arange(10)[::2]}, tmp_path / "o", max_shard_size=None)
    got = st_torch.load_file(tmp_path / "o" / "model.safetensors")
    assert torch.equal(got["t"], big.t()) and torch.equal(got["s"], other[::3])
    assert torch.equal(got["a"], torch.arange(10)[::2])
    with pytest.raises(TypeError, match="'x'"):
        ckpt.save({"x": object()}, tmp_path / "bad")
    assert not (tmp_path / "bad").exists() or not os.listdir(tmp_path / "bad")


def test_verify_finds_a_flipped_bit(tmp_path):
    ckpt.save({"a": torch.arange(1000.0), "b": torch.ones(10)}, tmp_path / "v", checksums=True)
    path = tmp_path / "v" / "model.safetensors"
    with ckpt.open(path) as c:
        assert c.verify(progress=False) == 2
    data = bytearray(path.read_bytes())
    data[-100] ^= 1  # inside "a" (the larger tensor, laid out last among equal dtypes)
    path.write_bytes(bytes(data))
    with ckpt.open(path) as c, pytest.raises(ckpt.Error) as e:
        c.verify(progress=False)
    assert status_of(e.value) == "CKPT_E_CHECKSUM/CKPT_D_CHECKSUM" and e.value.tensor in ("a", "b") and e.value.path == str(path)


def test_save_failure_leaves_previous_checkpoint(tmp_path):
    ckpt.save({"a": torch.ones(4)}, tmp_path / "o")
    before = (tmp_path / "o" / "model.safetensors").read_bytes()

    def boom(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ckpt.save({"a": torch.zeros(4), "b": torch.zeros(4)}, tmp_path / "o", progress=boom, overwrite=True)
    assert os.listdir(tmp_path / "o") == ["model.safetensors"]
    assert (tmp_path / "o" / "model.safetensors").read_bytes() == before


def test_nested_round_trip_restores_tuples_and_leaves(tmp_path):
    tree = {"enc": {"layers": [{"w": torch.ones(2)}, {"w": torch.zeros(2)}]}, "pair": (torch.arange(3), torch.ones(1)),
            "step": 5, "name": "run", 3: torch.full((2,), 3.0), "none": None}
    flat, structure = ckpt.flatten(tree, with_structure=True)
    assert set(flat) == {"enc.layers.0.w", "enc.layers.1.w", "pair.0", "pair.1", "3"}
    back = ckpt.unflatten(flat, structure)
    assert isinstance(back["pair"], tuple) and back["step"] == 5 and back["name"] == "run" and back["none"] is None
    assert torch.equal(back[3], tree[3])
    ckpt.save(tree, tmp_path / "n")
    loaded = ckpt.load(tmp_path / "n", nested=True)
    assert isinstance(loaded["pair"], tuple) and torch.equal(loaded["pair"][0], torch.arange(3))
    assert isinstance(loaded["enc"]["layers"], list) and torch.equal(loaded["enc"]["layers"][1]["w"], torch.zeros(2))
    assert loaded["step"] == 5 and 3 in loaded
    assert ckpt.unflatten({"a.0": 1, "a.1": 2, "b.x": 3}) == {"a": [1, 2], "b": {"x": 3}}


def test_flax_style_round_trip_with_jax(tmp_path):
    jnp = pytest.importorskip("jax.numpy")
    import ml_dtypes
    params = {"params": {"Dense_0": {"kernel": jnp.ones((3, 4), jnp.bfloat16), "bias": jnp.zeros((4,))},
                         "Embed_0": {"embedding": jnp.arange(6.0).reshape(2, 3)}}}
    as_np = {"params": {m: {k: np.asarray(v) for k, v in d.items()} for m, d in params["params"].items()}}
    ckpt.save(as_np, tmp_path / "flax")
    back = ckpt.load(tmp_path / "flax", framework="flax", nested=True)
    kernel = back["params"]["Dense_0"]["kernel"]
    assert type(kernel).__module__.startswith("jax") and kernel.dtype == ml_dtypes.bfloat16
    assert bool((kernel == params["params"]["Dense_0"]["kernel"]).all())
    assert bool((back["params"]["Embed_0"]["embedding"] == params["params"]["Embed_0"]["embedding"]).all())
    skeleton = ckpt.shapes(tmp_path / "flax")
    assert skeleton["params"]["Dense_0"]["kernel"].shape == (3, 4)


def test_convert_with_options_and_progress(llama, tmp_path):
    sd, path = llama
    seen = []
    ckpt.convert(path, tmp_path / "out.safetensors", dtype="F32", select="*layers.0.*", rename={"model.": "m."},
                 progress=lambda d, t: seen.append(d))
    got = st_torch.load_file(tmp_path / "out.safetensors")
    assert set(got) == {k.replace("model.", "m.", 1) for k in sd if ".layers.0." in k}
    assert all(got[k.replace("model.", "m.", 1)].dtype == torch.float32 for k in sd if ".layers.0." in k)
    assert seen
    torch.save(sd, tmp_path / "p.bin")
    ckpt.convert(tmp_path / "p.bin", tmp_path / "shards", max_shard_size="2KB", progress=False)
    back = ckpt.load(tmp_path / "shards")
    assert all(same(back[k], v) for k, v in sd.items())
    with pytest.raises(ckpt.ExistsError):
        ckpt.convert(path, tmp_path / "out.safetensors", progress=False)


def test_dtype_names():
    import ml_dtypes
    for given in ("BF16", "bf16", "bfloat16", torch.bfloat16, np.dtype(ml_dtypes.bfloat16)):
        assert ckpt.dtype_name(given) == "BF16"
    assert ckpt.dtype_name("f8_e4m3") == "F8_E4M3" and ckpt.dtype_name(np.float32) == "F32"
    with pytest.raises(ValueError, match="bfloat17"):
        ckpt.dtype_name("bfloat17")


def test_cast_matches_torch():
    x = torch.randn(1000) * 1000
    for dt in (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2):
        assert same(ckpt.cast(x, dt), x.to(dt))
    assert ckpt.cast(np.arange(4, dtype=np.float64), "F32").dtype == np.float32


def test_gil_released_during_load(tmp_path):
    big = {f"t{i}": torch.randn(1 << 20) for i in range(32)}  # 128 MiB
    st_torch.save_file(big, tmp_path / "big.safetensors")
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(1)

    th = threading.Thread(target=spin)
    th.start()
    try:
        for _ in range(3):
            ckpt.load(tmp_path / "big.safetensors", progress=False, io="buffered", threads=1)
    finally:
        stop.set()
        th.join()
    assert len(ticks) > 1000


def test_ckpt_command_is_installed(llama):
    _, path = llama
    exe = os.path.join(os.path.dirname(sys.executable), "ckpt")
    out = subprocess.run([exe, "inspect", str(path)], capture_output=True, text=True, check=True).stdout
    assert "model.layers.0.mlp.up_proj.weight" in out


def test_io_is_the_catalogs_one_knob(tmp_path):
    """io= opens the checkpoint so (ckpt_catalog_options.io): "direct" makes
    no mappings, so a load asking for views reads every tensor instead;
    "buffered" and "auto" keep views.  A load has no io of its own."""
    from ckpt import _ckpt
    w = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    st_torch.save_file({"w": w}, tmp_path / "m.safetensors")
    for io, views in ((0, 1), (1, 1), (2, 0)):
        cat = _ckpt.Catalog(os.fspath(tmp_path / "m.safetensors"), io=io)
        plan = _ckpt.Plan(cat)
        plan.load(views=2)
        assert plan.stats()["views"] == views, io
        assert bytes(plan.data(0)) == w.numpy().tobytes()
        with pytest.raises(TypeError):
            plan.load(io=io)
    with pytest.raises(ckpt.Error, match="ckpt_io_mode"):
        _ckpt.Catalog(os.fspath(tmp_path / "m.safetensors"), io=7)
    # The public keywords open the catalog that way.
    assert torch.equal(ckpt.load(tmp_path / "m.safetensors", io="direct", progress=False)["w"], w)
    with pytest.raises(ValueError, match="io must be one of"):
        ckpt.load(tmp_path / "m.safetensors", io="fast")


def _page_cache_is_droppable(path):
    fs = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True).stdout.strip()
    if fs in ("tmpfs", "ramfs"):
        pytest.skip(f"{path} is on {fs}: its pages cannot leave the page cache")


@pytest.mark.parametrize("tensors", [6, 3000], ids=["large tensors", "many small tensors"])
def test_a_save_writes_back_as_it_writes(tmp_path, tensors):
    """ckpt.save starts the write-back of what it writes at once and drops
    it from the page cache once on disk (the writer's write_back): the
    disk works while the save goes on instead of all at the commit's
    fsync, and a saved checkpoint does not evict a training job's data.
    Small tensors are joined into larger ranges first (each its own small
    write and wait would be slow).  Before, all 96 MiB stayed cached."""
    from page_cache import resident_fraction
    _page_cache_is_droppable(tmp_path)
    size = (96 << 20) // tensors // 4
    sd = {f"t{i}": torch.full((size,), float(i)) for i in range(tensors)}
    ckpt.save(sd, tmp_path / "m.safetensors")
    resident = resident_fraction(tmp_path / "m.safetensors")
    assert resident < 0.1, f"{resident:.0%} of the saved file is still in the page cache"
    got = ckpt.load(tmp_path / "m.safetensors")
    assert all(torch.equal(got[k], v) for k, v in sd.items())


def test_a_no_sync_save_leaves_its_file_in_the_page_cache(tmp_path):
    """no_sync asks a save not to wait for the disk: no drop-behind then
    (it waits for the older ranges' write-back)."""
    from page_cache import resident_fraction
    _page_cache_is_droppable(tmp_path)
    ckpt.save({f"t{i}": torch.ones(4 << 20) for i in range(6)}, tmp_path / "m.safetensors", no_sync=True)
    assert resident_fraction(tmp_path / "m.safetensors") > 0.9
