"""Scheduled runs: named crons whose tasks fire as jobs, from a per-user scheduler process.

``cron`` (expressions and their times), ``model`` (what a schedule and its runs are),
``schedule_file`` (the YAML a user writes), ``store`` (their tables in the job store),
``tick`` (one idempotent pass: due times recorded, tasks submitted, runs advanced),
``launch`` (a task as a job), ``scheduler`` (the process), ``notebook_task`` (a notebook
executed headless as a job's command), ``service`` (the API that the CLI, the server and
the magic call, with the permission checks), ``cli`` (``air schedule``, ``air scheduler``).
"""
