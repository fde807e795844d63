"""torch.distributed (NCCL backend) workload for scripts/gpu-nccl-check.sh.

Usage: python3 nccl_check.py ITERATIONS OUTDIR

Spawns 2 ranks (torch.multiprocessing, one GPU each). Every iteration each
rank does, in this order:
  all_reduce                 ALL_REDUCE float32 elements
  broadcast from rank 0      BROADCAST float32 elements (torch calls ncclBcast, which calls ncclBroadcast)
  all_gather_into_tensor     ALL_GATHER float32 elements per rank
  send/recv                  rank 0 sends SEND_RECV float32 elements to rank 1, then receives as many from it;
                             rank 1 receives, then sends
The element counts are odd and distinct so that the checker can tell the
program's calls from NCCL calls PyTorch makes on its own (barriers, ...).
Each rank writes OUTDIR/rank<R>.json: its rank, pid and what it did; the
parent prints one JSON line with the expected per-rank counts and bytes.
NCCL_* variables are inherited as they are: never set here.
"""
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2
COUNTS = {"ncclAllReduce": 262147, "ncclBroadcast": 65539, "ncclAllGather": 131075, "ncclSend": 32771,
          "ncclRecv": 32771}
ELEMENT_BYTES = 4  # float32


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, iterations, outdir, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=WORLD, device_id=device)
    reduce_buf = torch.ones(COUNTS["ncclAllReduce"], dtype=torch.float32, device=device)
    bcast_buf = torch.full((COUNTS["ncclBroadcast"],), float(rank), dtype=torch.float32, device=device)
    gather_in = torch.full((COUNTS["ncclAllGather"],), float(rank), dtype=torch.float32, device=device)
    gather_out = torch.empty(WORLD * COUNTS["ncclAllGather"], dtype=torch.float32, device=device)
    p2p = torch.full((COUNTS["ncclSend"],), float(rank), dtype=torch.float32, device=device)
    peer = 1 - rank
    for _ in range(iterations):
        dist.all_reduce(reduce_buf)
        dist.broadcast(bcast_buf, src=0)
        dist.all_gather_into_tensor(gather_out, gather_in)
        if rank == 0:
            dist.send(p2p, dst=peer)
            dist.recv(p2p, src=peer)
        else:
            dist.recv(p2p, src=peer)
            dist.send(p2p, dst=peer)
    torch.cuda.synchronize()
    # The values prove the collectives ran: broadcast from rank 0 leaves zeros.
    ok = bool(bcast_buf.eq(0).all().item()) and bool(gather_out[COUNTS["ncclAllGather"]:].eq(1).all().item())
    dist.destroy_process_group()
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "pid": os.getpid(), "iterations": iterations, "values_ok": ok,
                   "device": torch.cuda.get_device_name(device)}, f)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: nccl_check.py ITERATIONS OUTDIR")
    iterations, outdir = int(sys.argv[1]), sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    if torch.cuda.device_count() < WORLD:
        sys.exit(f"nccl_check.py: needs {WORLD} GPUs, found {torch.cuda.device_count()}")
    mp.spawn(worker, args=(iterations, outdir, free_port()), nprocs=WORLD, join=True)
    expected = {api: {"calls_per_rank": iterations, "count": n, "bytes": n * ELEMENT_BYTES}
                for api, n in COUNTS.items()}
    nccl = torch.cuda.nccl.version()  # a tuple in recent PyTorch, an int in old ones
    print(json.dumps({"world": WORLD, "iterations": iterations, "torch": torch.__version__,
                      "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl),
                      "expected": expected}))


if __name__ == "__main__":
    main()
