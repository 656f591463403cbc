"""One rank of test_collective_credentials.py: joins a gloo group (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the test), loads URL with
ckpt.distributed.load, and writes OUT-<rank>.pt: {"state": ...} or
{"error": message}."""
import sys

import torch
import torch.distributed as dist

import ckpt.distributed as cd


def main(url, out):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        result = {"state": cd.load(url)}
    except Exception as e:  # noqa: BLE001 - the test judges what was raised
        result = {"error": f"{type(e).__name__}: {e}"}
    torch.save(result, f"{out}-{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
