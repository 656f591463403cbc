"""ckpt.distributed over torch.distributed (gloo on 127.0.0.1, processes
spawned here): every rank's tensors equal the slices of a single-process
load; DTensors equal distribute_tensor of the full tensors; checkpoints
saved by N ranks are byte-identical to huggingface_hub's
save_torch_state_dict of the consolidated state dict and load on M ranks
(N, M in 1, 2, 4); a failing rank is named on the others; a rank killed
mid-save makes the others fail within the timeout, and nothing is
published."""
import filecmp
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dist_workers  # noqa: E402
from page_cache import resident_fraction  # noqa: E402

WORLD = 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(tmp, scenario, timeout=300, world=WORLD):
    """Runs dist_workers.run on `world` processes; returns each rank's result
    (None for a rank that wrote none) and exit codes."""
    ctx = multiprocessing.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=dist_workers.run, args=(r, world, port, str(tmp), scenario)) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(1.0, deadline - time.monotonic()))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    results = []
    for r in range(world):
        f = Path(tmp) / f"result-{r}.json"
        results.append(json.loads(f.read_text()) if f.exists() else None)
    codes = [p.exitcode for p in procs]
    assert not hung, f"ranks {hung} hung; exit codes {codes}; {seen(results)}"
    return results, codes


def seen(results):
    """What every rank recorded, for a failing assertion's message: a
    failure under load must say how far each rank got and what it saw."""
    return "; ".join(f"rank {r}: " + ("no result" if res is None else json.dumps(res, default=str)[:2000])
                     for r, res in enumerate(results))


def same_tree(a, b):
    names = sorted(p.name for p in Path(a).iterdir())
    assert names == sorted(p.name for p in Path(b).iterdir()), (names, sorted(p.name for p in Path(b).iterdir()))
    for n in names:
        assert filecmp.cmp(Path(a) / n, Path(b) / n, shallow=False), n


@pytest.fixture(scope="module")
def main_run(tmp_path_factory):
    from huggingface_hub import save_torch_state_dict
    tmp = tmp_path_factory.mktemp("dist")
    full = dist_workers.full_state_dict()
    (tmp / "model").mkdir()
    save_torch_state_dict(full, tmp / "model", max_shard_size="1MB")
    results, codes = spawn(tmp, "main")
    return tmp, full, results, codes


def test_every_rank_passes(main_run):
    tmp, full, results, codes = main_run
    for r, res in enumerate(results):
        assert res is not None, f"rank {r} wrote no result (exit code {codes[r]})"
        assert res["failures"] == [], f"rank {r}: " + "\n".join(res["failures"])


def test_replicated_tensors_are_read_once(main_run):
    tmp, full, results, codes = main_run
    for n in (2, 4):
        notes = [next(x for x in res["notes"] if x.get("load") == n and x["mode"] == "broadcast")["stats"]
                 for res in results[:n]]
        replicated = notes[0]["replicated_bytes"]
        assert replicated > 4_000_000  # the rotary table is whole on every rank: read in row ranges
        # Together the ranks read the replicated bytes about once, not n times.
        total_read = sum(s["bytes_read"] for s in notes)
        sliced = sum(t.numel() * t.element_size() for name, t in full.items() if "proj" in name or "embed" in name)
        assert total_read < replicated * 1.05 + sliced
        for s in notes:
            assert s["bytes_read"] < replicated / n * 1.3 + sliced
        read_mode = [next(x for x in res["notes"] if x.get("load") == n and x["mode"] == "read")["stats"]
                     for res in results[:n]]
        assert all(s["bytes_read"] >= replicated for s in read_mode)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_saved_by_n_ranks_equals_save_torch_state_dict(main_run, n):
    from huggingface_hub import save_torch_state_dict
    tmp, full, results, codes = main_run
    ref = tmp / f"ref-{n}"
    ref.mkdir()
    save_torch_state_dict(full, ref, max_shard_size="2MB")
    same_tree(ref, tmp / f"saved-{n}")


def test_dtensor_save_equals_save_torch_state_dict_with_tied_weights(main_run):
    from huggingface_hub import save_torch_state_dict
    tmp, full, results, codes = main_run
    tied = dict(full)
    tied["lm_head.weight"] = tied["model.embed_tokens.weight"]
    (tmp / "ref-tied").mkdir()
    save_torch_state_dict(tied, tmp / "ref-tied", max_shard_size="2MB")
    same_tree(tmp / "ref-tied", tmp / "saved-dtensor")
    index = json.loads((tmp / "saved-dtensor" / "model.safetensors.index.json").read_text())
    # As the hub: the first name in order is kept, the other recorded.
    assert "model.embed_tokens.weight" not in index["weight_map"]
    assert index["metadata"]["model.embed_tokens.weight"] == "lm_head.weight"


def test_save_replaces_a_checkpoint_only_with_overwrite(main_run):
    """As every other save: rank 0 raises ExistsError with the hint, the
    others fail naming it; the checkpoint is left as it was (it still
    equals the hub's, above)."""
    tmp, full, results, codes = main_run
    kind, is_exists, status, message = results[0]["exists"]
    assert (kind, is_exists, status) == ("ExistsError", True, "CKPT_E_EXISTS") and "overwrite=True" in message
    for r in results[1:]:
        assert r["exists"][2] == "CKPT_E_PEER/CKPT_D_PEER_FAILED" and "rank 0 failed (CKPT_E_EXISTS)" in r["exists"][3]


def test_collective_convert_equals_convert(main_run):
    import ckpt
    tmp, full, results, codes = main_run
    ckpt.convert(tmp / "model", tmp / "converted-ref", max_shard_size="1MB", dtype="float16")
    same_tree(tmp / "converted-ref", tmp / "converted")


def test_a_killed_rank_fails_the_others_within_the_timeout(tmp_path):
    results, codes = spawn(tmp_path, "kill", timeout=180)
    assert codes[2] == -9 and results[2] is None  # rank 2 was killed
    for r in (0, 1, 3):
        res = results[r]
        assert res is not None, f"rank {r} wrote no result (exit code {codes[r]})"
        assert res["failures"] == [], res["failures"]
        err = res["error"]
        assert err["status"] in ("CKPT_E_TIMEOUT/CKPT_D_PEER_TIMEOUT", "CKPT_E_PEER/CKPT_D_COMM"), err
        assert "rank 2" in err["message"], err
        assert err["seconds"] < 8 * 2.5 + 10, err  # the 8 s timeout, once for the step and once to name the rank
    assert not (tmp_path / "killed").exists()


def test_without_torch_distributed_each_rank_reads_its_part(tmp_path, monkeypatch):
    # The "none" communicator: no process group; rank and size given, or
    # from the launcher's environment. Each rank reads its slices itself.
    import ckpt
    import ckpt.distributed as cd
    from huggingface_hub import save_torch_state_dict
    assert not dist.is_initialized()
    full = dist_workers.full_state_dict()
    save_torch_state_dict(full, tmp_path, max_shard_size="1MB")
    rules = {"tp_select": ["*proj.weight", "*embed_tokens*"]}
    for n in (1, 2, 4):
        for r in range(n):
            sd, stats = cd.load(tmp_path, rules, rank=r, size=n, return_stats=True)
            solo = ckpt.load(tmp_path, tp_rank=r, tp_size=n, **rules)
            assert sorted(sd) == sorted(full)
            for name in full:
                assert torch.equal(sd[name], solo[name]), (n, r, name)
            assert stats["bytes_received"] == 0 and stats["bytes_read"] >= stats["bytes_needed"] > 0
    for env in ({"RANK": "1", "WORLD_SIZE": "2"}, {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4"}):
        for k in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                  "SLURM_PROCID", "SLURM_NTASKS"):
            monkeypatch.delenv(k, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        r, n = (int(v) for v in env.values())
        sd = cd.load(tmp_path, rules)
        want = ckpt.load(tmp_path, tp_rank=r, tp_size=n, **rules)
        assert all(torch.equal(sd[k], want[k]) for k in want)
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ckpt.Error, match="RANK"):
        cd.load(tmp_path, rules)
    with pytest.raises(ValueError, match="together"):
        cd.load(tmp_path, rules, rank=1)


def test_saving_plain_tensors_does_not_import_distributed_tensors(tmp_path):
    """Issue 32 §4, the profile of a collective save by 4 ranks: importing
    torch.distributed.tensor (to ask whether an entry is a DTensor) cost each
    rank seconds, more than its writes.  No DTensor exists unless it was
    imported, so plain tensors do not import it."""
    code = f"""
import sys, datetime, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://{tmp_path}/store", rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=60))
import ckpt.distributed as cd
cd.save({{"a": torch.ones(4, 4)}}, "{tmp_path}/out", timeout=60)
assert "torch.distributed.tensor" not in sys.modules, "imported"
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "out" / "model.safetensors").exists()


def test_ranks_begin_their_writes_in_different_files(tmp_path):
    """Issue 32 §4: every rank wrote its parts in declaration order, so the
    ranks of a tensor-parallel save wrote into the same file at the same
    time, and the file system serialized them (a buffered write holds the
    file's inode lock).  Each rank begins at its own share of its bytes: the
    4 ranks' first writes land in 4 different shards, every part is written
    once, and the output is one process's save, byte for byte.  The order
    is the writer's (ckpt_shard_writer_order), so that background saves
    (staging="copy") take it too: they wrote in declaration order."""
    import ckpt
    results, codes = spawn(tmp_path, "write_order", timeout=240)
    assert codes == [0] * WORLD and all(r["failures"] == [] for r in results), seen(results)
    out = tmp_path / "order-out"
    ref = tmp_path / "order-ref"
    ckpt.save(dist_workers.order_state_dict(), ref, max_shard_size="40KB")
    same_tree(ref, out)
    weight_map = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert len(set(weight_map.values())) == WORLD
    same_tree(ref, tmp_path / "order-bg")
    for key in ("order", "background_order"):
        for r in results:
            assert sorted(r[key]) == sorted(weight_map), (key, seen(results))
        first = [weight_map[r[key][0]] for r in results]
        assert len(set(first)) == WORLD, (key, first, seen(results))


def test_every_rank_syncs_the_files_it_wrote_before_the_vote(tmp_path):
    """Issue 32 §4: rank 0 fsynced its bytes only in the commit, after the
    vote, alone and file after file, while the other ranks had already
    synced theirs: the save's last second was rank 0's.  Every rank, rank 0
    too, now syncs the files it wrote before it votes (each rank its own,
    as a network file system needs), so that the commit finds them clean."""
    results, codes = spawn(tmp_path, "sync", timeout=240)
    assert codes == [0] * WORLD and all(r["failures"] == [] for r in results), seen(results)
    weight_map = json.loads((tmp_path / "sync-out" / "model.safetensors.index.json").read_text())["weight_map"]
    assert len(set(weight_map.values())) == 2 * WORLD
    for rank, r in enumerate(results):
        assert r["stats"]["files_synced"] == len({weight_map[n] for n in r["tensors"]}) == 2, (rank, seen(results))


def test_a_collective_save_writes_back_as_it_writes(tmp_path):
    """Issue 32 §4: the ranks of a collective save filled the page cache and
    left every byte to the fsyncs before the vote (4 ranks saving 4 GB: the
    fsyncs took 1.9 s after writes of 1.0-1.9 s), the disk idle meanwhile.
    Every rank now starts each range's write-back as it writes it and drops
    it from the cache once it is on disk (the writer's drop-behind), so that
    the fsyncs find little to do: after the save, the shard, 96 MiB written
    by 2 ranks, is out of the page cache (all of it was in before)."""
    import ckpt
    fs = subprocess.run(["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True, text=True).stdout.strip()
    if fs in ("tmpfs", "ramfs"):
        pytest.skip(f"{tmp_path} is on {fs}: its pages cannot leave the page cache")
    results, codes = spawn(tmp_path, "write_back", timeout=240, world=2)
    assert codes == [0, 0] and all(r["failures"] == [] for r in results), seen(results)
    out = tmp_path / "wb-out"
    shards = [p for p in out.iterdir() if p.suffix == ".safetensors"]
    assert len(shards) == 1, shards
    resident = resident_fraction(shards[0])
    assert resident < 0.1, f"{resident:.0%} of {shards[0].name} is still in the page cache after the save"
    assert all(r["stats"]["files_synced"] == 1 for r in results), seen(results)
    assert torch.equal(ckpt.load(out)["w"], dist_workers.write_back_tensor())


def test_a_no_sync_collective_save_does_not_wait_for_the_disk(tmp_path):
    """no_sync asks a save not to wait for the disk: drop-behind, which
    waits for each range's write-back, stays off then, and the shard's
    pages stay in the page cache (2-3x the time of the MPI simulation's
    16 MiB save with it)."""
    import ckpt
    fs = subprocess.run(["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True, text=True).stdout.strip()
    if fs in ("tmpfs", "ramfs"):
        pytest.skip(f"{tmp_path} is on {fs}: its pages cannot leave the page cache")
    results, codes = spawn(tmp_path, "write_back_no_sync", timeout=240, world=2)
    assert codes == [0, 0] and all(r["failures"] == [] for r in results), seen(results)
    shards = [p for p in (tmp_path / "wb-out").iterdir() if p.suffix == ".safetensors"]
    resident = resident_fraction(shards[0])
    assert resident > 0.9, f"only {resident:.0%} of {shards[0].name} is in the page cache after a no_sync save"
    assert torch.equal(ckpt.load(tmp_path / "wb-out")["w"], dist_workers.write_back_tensor())


def test_a_rank_opens_only_the_files_it_writes_under_a_low_ulimit(tmp_path):
    """Issue 32: every joined rank of a collective save opened every output
    shard when it joined rank 0's writer, and held them to the vote (1,000
    ranks × 2,000 shards exceed the default `ulimit -n`). Ranks 1.. save
    under an RLIMIT_NOFILE that leaves room for their own shards, not for
    the 64: the save succeeds, each opened only the shards of its tensors,
    and the output is one process's save, byte for byte."""
    import ckpt
    results, codes = spawn(tmp_path, "many_shards", timeout=240)
    assert codes == [0] * WORLD and all(r["failures"] == [] for r in results), seen(results)
    out = tmp_path / "many-out"
    ref = tmp_path / "many-ref"
    ckpt.save(dist_workers.many_shards_state_dict(), ref, max_shard_size="20KB")
    same_tree(ref, out)
    weight_map = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert len(set(weight_map.values())) == dist_workers.MANY_SHARDS
    for rank, r in enumerate(results[1:], 1):
        assert r["opened"] == sorted({weight_map[n] for n in r["tensors"]}), (rank, r)


def test_a_collective_convert_of_gguf_blocks_follows_the_single_process_rule(tmp_path):
    """Blocks the output's format cannot hold, that no rule asked a block
    type of, become f32 on every rank as in ckpt.convert
    (ckpt_plan_dequantize_for in ckpt_convert_collective); before, the
    collective convert refused them ("safetensors has no Q8_0")."""
    import ckpt
    ckpt.save({"w": torch.randn(64, 256), "b": torch.randn(256)}, tmp_path / "s.safetensors")
    ckpt.convert(tmp_path / "s.safetensors", tmp_path / "q.gguf", dtype="q8_0")
    ckpt.convert(tmp_path / "q.gguf", tmp_path / "single.safetensors")
    results, codes = spawn(tmp_path, "gguf_blocks", timeout=240, world=2)
    assert codes == [0, 0] and all(r["failures"] == [] for r in results), seen(results)
    assert (tmp_path / "collective.safetensors").read_bytes() == (tmp_path / "single.safetensors").read_bytes()
