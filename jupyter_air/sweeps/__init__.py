"""Sweeps: an Optuna study whose every trial is one job, with a child run under the
sweep's run, driven by a detached process of the user's and durable in AIR_HOME.

``sweep_file`` reads and checks what is asked (``space_text`` the space written inline,
as a notebook's ``%%air_sweep`` takes it), ``space`` turns it into Optuna's terms,
``store`` keeps the studies, ``trials`` makes a trial's job and reads its metrics,
``driver`` keeps trials running, ``notices`` tells of a sweep's end, ``service`` is what
the CLI and the kernel call, each call checked against the sweep's grants. Importing
this package imports neither Optuna nor MLflow.
"""
