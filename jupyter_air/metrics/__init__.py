"""Prometheus metrics of the GPUs and the jobs holding them, for the people who run the
machine: dcgm-exporter's gauges with the user, job and notebook of each GPU's holders,
GPU-seconds allocated and idle per user and job, jobs by state. Served by the Jupyter
server (``jupyter-air/metrics``) and by ``air exporter``; docs/prometheus.md."""
