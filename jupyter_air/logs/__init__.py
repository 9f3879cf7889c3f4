"""Rank output: capture into per-rank log files, and reading them back."""
