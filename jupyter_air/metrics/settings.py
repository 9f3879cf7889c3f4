"""What an operator configures of the metrics (``c.AirMetrics``), and the metrics token.

The token is a scope of its own: it reads the metrics and nothing else, and nothing
else (a Jupyter token, a browser's login) reads the metrics. It lives in a file private
to the user the server runs as, read on every scrape so that replacing the file
rotates it.
"""

from __future__ import annotations

import hmac
import logging
import os
import stat
from pathlib import Path
from typing import Any

from traitlets import Float, TraitError, Unicode, default, validate
from traitlets.config import Configurable

from ..tracking.energy import checked_intensity, env_grams_co2_per_kwh, keep_grid_intensity

log = logging.getLogger(__name__)

#: Fewer characters than this is guessable over the network.
MIN_TOKEN_CHARS = 32


class TokenError(ValueError):
    """The metrics token file cannot be used; the message says why and what to do."""


class AirMetrics(Configurable):
    """The Prometheus metrics of ``jupyter-air/metrics`` and ``air exporter``."""

    token_file = Unicode(
        help=(
            "File holding the bearer token Prometheus sends to read jupyter-air/metrics "
            "(at least 32 characters, the file readable by this user only). Empty: the "
            "route is off. Default: $AIR_METRICS_TOKEN_FILE."
        ),
    ).tag(config=True)

    idle_threshold = Float(
        5.0,
        help=(
            "GPU utilization (%) under which a sample of a held GPU counts as idle in "
            "air_gpu_idle_seconds_total."
        ),
    ).tag(config=True)

    forget_after = Float(
        3600.0,
        help=(
            "Seconds after its last GPU sample that a job's usage counters leave the "
            "metrics (Prometheus keeps what it scraped), so that ended jobs do not pile up."
        ),
    ).tag(config=True)

    grams_co2_per_kwh = Float(
        None,
        allow_none=True,
        help=(
            "The grid's carbon intensity (grams of CO2 per kWh): with it, the runs of this "
            "user's jobs log system/gpu_co2_grams beside system/gpu_energy_kwh, and air get "
            "shows it (the server keeps it in AIR_HOME for jobs and air commands however "
            "started; $AIR_GRAMS_CO2_PER_KWH, where set, wins for them). None: no CO2. "
            "Default: $AIR_GRAMS_CO2_PER_KWH."
        ),
    ).tag(config=True)

    @default("token_file")
    def _token_file_default(self) -> str:
        return os.environ.get("AIR_METRICS_TOKEN_FILE", "")

    @default("grams_co2_per_kwh")
    def _intensity_default(self) -> float | None:
        try:
            return env_grams_co2_per_kwh()
        except ValueError as err:
            raise TraitError(str(err)) from None

    @validate("grams_co2_per_kwh")
    def _intensity(self, proposal: dict[str, Any]) -> float | None:
        value = proposal["value"]
        if value is None:
            return None
        try:
            return checked_intensity(float(value), "AirMetrics.grams_co2_per_kwh")
        except ValueError as err:
            raise TraitError(str(err)) from None

    def share_with_jobs(self, home: Path) -> None:
        """Keep ``grams_co2_per_kwh`` in AIR_HOME ``home``, where the user's jobs and
        ``air`` commands read it, whoever started them (none: removed). A file that
        cannot be written costs the jobs' CO2 figures only, said in the log."""
        try:
            keep_grid_intensity(home, self.grams_co2_per_kwh)
        except OSError as err:
            log.warning("jobs will not know the grid's CO2 intensity: %s", err)

    @validate("idle_threshold")
    def _percent(self, proposal: dict[str, Any]) -> float:
        value = float(proposal["value"])
        if not 0 <= value <= 100:
            raise TraitError(f"AirMetrics.idle_threshold must be a percent, got {value}")
        return value

    @validate("forget_after")
    def _positive(self, proposal: dict[str, Any]) -> float:
        value = float(proposal["value"])
        if not value > 0:
            raise TraitError(f"AirMetrics.forget_after must be > 0 seconds, got {value}")
        return value


def read_token(path: str | Path) -> str:
    """The token in ``path`` (its first line), refused with the reason when the file is
    missing, readable or writable by others, not this user's, or too short."""
    path = Path(path).expanduser()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as err:
        raise TokenError(f"metrics token file {path}: {err.strerror}") from None
    with os.fdopen(fd, encoding="utf-8", errors="replace") as file:
        st = os.fstat(file.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise TokenError(f"metrics token file {path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise TokenError(f"metrics token file {path} is not yours")
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise TokenError(
                f"metrics token file {path} is open to others (mode "
                f"{stat.S_IMODE(st.st_mode):o}): run `chmod 600 {path}`"
            )
        token = file.read(4096).split("\n", 1)[0].strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenError(
            f"metrics token in {path} has {len(token)} characters, fewer than "
            f"{MIN_TOKEN_CHARS}: make one with `openssl rand -hex 32 > {path}`"
        )
    return token


def bearer_matches(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries exactly ``token`` as a bearer token
    (compared in constant time)."""
    scheme, _, given = (header or "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())
