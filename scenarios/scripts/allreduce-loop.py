"""A training loop for faults that strike while a job trains (scenarios/stall-*.yaml,
tests/e2e/test_stall.py): every step one all_reduce, then MATMULS 256x256 matmuls (about
0.8 ms each here) or, without them, a 50 ms sleep. Rank STALL_RANK sleeps STALL_SECONDS
in Python at step STALL_AT (a checkpoint, or user code stuck)."""
import os
import time

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    stall_rank, stall_at = int(os.environ.get("STALL_RANK", "-1")), int(os.environ.get("STALL_AT", "50"))
    t = torch.ones(1000)
    work = int(os.environ.get("MATMULS", "0"))
    torch.set_num_threads(1)
    m = torch.rand(256, 256)
    for step in range(int(os.environ.get("STEPS", "100000"))):
        if rank == stall_rank and step == stall_at:
            print(f"rank {rank}: sleeping at step {step}", flush=True)
            time.sleep(float(os.environ.get("STALL_SECONDS", "600")))
        dist.all_reduce(t)
        for _ in range(work):
            m = torch.tanh(m @ m)
        if not work:
            time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
