"""GPU and host metrics for the GPU resources panel: NVML access, sampling, history."""
