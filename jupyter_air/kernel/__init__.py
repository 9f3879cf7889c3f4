"""The IPython side: the ``%%air_distributed`` magic, the ``@distributed`` decorator."""
