"""What a GPU node offers NCCL: hardware and libraries, NVML, RDMA devices, NCCL's own log lines, and ``make gpu-check``."""
