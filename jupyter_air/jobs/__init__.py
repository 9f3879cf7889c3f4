"""Jobs: workloads, the job store, the supervisor and its rank backends."""
