"""MLflow: experiments, runs, links and system metrics of jobs."""
