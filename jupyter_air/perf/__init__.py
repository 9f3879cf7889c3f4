"""A job's performance: every rank's step marks (``marks``), the hooks that write them
with no change to the user's code (``hooks``), and what is read from them while the job
runs: progress and ETA (``progress``), MFU, the split of a step, stragglers, profiles.

Nothing here is imported by a rank that does not mark steps; the rank side imports no
torch, transformers or Lightning of its own.
"""
