"""What a GPU node offers NCCL: hardware and libraries, NVML, RDMA devices and limits,
NCCL's own log lines and diagnostics (``make gpu-check`` is ``run.gpucheck``)."""
