"""Notifications: a job or a schedule run that ends, fails or needs attention tells its
owner, in JupyterLab, by email or through a webhook (see docs/notifications.md).

``targets`` parses where they go, ``message`` what they say, ``outbox`` records each
once, ``delivery`` sends one, ``courier`` sends what is due; ``settings`` is the user's
configuration. Nothing here knows of jobs or schedules: they build the messages.
"""
