"""Where a notification goes and on which events: the ``notify:`` list of a workload or
schedule file, ``--notify`` of the magic and ``air run``, ``@distributed(notify=...)``
and the user's defaults (``c.AirNotify.defaults``), all read by ``parse`` into one
``Target``.

A target is one of::

    {"jupyterlab": true, "on": ["failure"]}
    {"email": "me@example.com", "on": ["failure", "duration:2h"]}
    {"webhook": "https://hooks.example.com/T000/B000/XXXX", "format": "slack"}

or the same as one string, as a flag takes it: ``jupyterlab``, ``email:me@example.com
on:failure,success``, ``webhook:https://... format:teams``. A webhook's URL is a secret
(anyone holding it can post there): ``shown`` gives its host only.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


class Event(enum.StrEnum):
    """What happened to a job or a schedule run."""

    START = "start"
    SUCCESS = "success"
    FAILURE = "failure"  # failed or timed out
    CANCELLED = "cancelled"
    RETRY = "retry"  # an attempt failed, another starts
    HINT = "hint"  # idle GPUs, memory full, a likely hang
    DURATION = "duration"  # still running after the trigger's threshold
    SKIPPED = "skipped"  # a schedule's time that did not fire
    TRACKING = "tracking"  # the tracking server refused the run's data for good
    GUARD = "guard"  # a guard on a metric held (``jobs.guards``): every target is told


class Channel(enum.StrEnum):
    JUPYTERLAB = "jupyterlab"
    EMAIL = "email"
    WEBHOOK = "webhook"


class WebhookFormat(enum.StrEnum):
    """The JSON a webhook receives: ours, or an incoming webhook's of Slack or Teams."""

    GENERIC = "generic"
    SLACK = "slack"
    TEAMS = "teams"


class BadTarget(ValueError):
    """A target that cannot be used; its message is one line naming what is wrong."""


#: What ``on`` means when a target does not say: the job (or schedule run) ended.
ENDS = ("success", "failure", "cancelled")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_EMAIL = re.compile(r"[^@\s,;<>\"']+@[^@\s,;<>\"']+\.[^@\s,;<>\"'.]+")


@dataclass(frozen=True)
class Trigger:
    event: Event
    #: Seconds, for ``duration``: the job has run this long.
    after: float | None = None

    def __str__(self) -> str:
        return self.event.value if self.after is None else f"duration:{_seconds(self.after)}"


@dataclass(frozen=True)
class Target:
    channel: Channel
    #: The address: an email's, a webhook's URL; "" for JupyterLab.
    address: str
    on: tuple[Trigger, ...]
    format: WebhookFormat = WebhookFormat.GENERIC

    def wants(self, event: Event) -> bool:
        return any(t.event is event for t in self.on)

    @property
    def durations(self) -> list[float]:
        return sorted(t.after for t in self.on if t.after is not None)

    def shown(self) -> str:
        """The target as anyone may see it: a webhook's URL is its host only."""
        if self.channel is Channel.WEBHOOK:
            return f"webhook {shown_url(self.address)}"
        if self.channel is Channel.EMAIL:
            return f"email to {self.address}"
        return "JupyterLab"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"on": [str(t) for t in self.on]}
        if self.channel is Channel.JUPYTERLAB:
            data["jupyterlab"] = True
        else:
            data[self.channel.value] = self.address
        if self.channel is Channel.WEBHOOK:
            data["format"] = self.format.value
        return data


def shown_url(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}/…"


def parse(value: Any) -> Target:
    """A target from a mapping (a file's, the decorator's) or a flag's string."""
    if isinstance(value, str):
        value = _from_text(value)
    if isinstance(value, Target):
        return value
    if not isinstance(value, Mapping):
        raise BadTarget(f"expected a mapping like {{email: me@example.com}}, got {value!r}")
    data = dict(value)
    if True in data:  # YAML 1.1 (PyYAML) reads the key ``on`` as true
        data.setdefault("on", data.pop(True))
    on = _triggers(data.pop("on", None))
    fmt = data.pop("format", None)
    channels = [c for c in Channel if c.value in data]
    if len(channels) != 1:
        raise BadTarget(
            "say one of jupyterlab, email: ADDRESS or webhook: URL"
            + (f" (got {', '.join(c.value for c in channels)})" if channels else "")
        )
    channel = channels[0]
    address = data.pop(channel.value)
    if data:
        raise BadTarget(f"unknown field{'s' if len(data) > 1 else ''}: {', '.join(map(str, data))}")
    if fmt is not None and channel is not Channel.WEBHOOK:
        raise BadTarget("format is for a webhook")
    if channel is Channel.JUPYTERLAB:
        if address is not True:
            raise BadTarget(f"jupyterlab: expected true, got {address!r}")
        return Target(channel, "", on)
    if not isinstance(address, str):
        raise BadTarget(f"{channel.value}: expected text, got {address!r}")
    if channel is Channel.EMAIL:
        if not _EMAIL.fullmatch(address):
            raise BadTarget(f"email: {address!r} is not an email address")
        return Target(channel, address, on)
    return Target(channel, _url(address), on, _format(fmt, address))


def parse_all(values: Sequence[Any] | None) -> tuple[Target, ...]:
    """Every target of a list, the first bad one refused with its place in the list."""
    targets = []
    for i, value in enumerate(values or ()):
        try:
            targets.append(parse(value))
        except BadTarget as err:
            where = f"notify[{i}]: " if len(values or ()) > 1 else ""
            raise BadTarget(f"{where}{err}") from None
    return tuple(targets)


def from_json(data: Mapping[str, Any]) -> Target:
    """A stored target (``Target.to_json``)."""
    return parse(data)


def _from_text(text: str) -> dict[str, Any]:
    """``email:ADDR on:a,b``, ``webhook:URL format:slack``, ``jupyterlab on:failure``; in
    quotes too, as IPython's magics pass a quoted argument on."""
    text = text.strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1]
    words = text.split()
    if not words:
        raise BadTarget("empty target")
    head, *rest = words
    kind, _, address = head.partition(":")
    data: dict[str, Any] = {kind: True if kind == Channel.JUPYTERLAB and not address else address}
    for word in rest:
        key, sep, val = word.partition(":")
        if not sep or key not in ("on", "format"):
            raise BadTarget(f"{word!r}: expected on:EVENT,... or format:generic|slack|teams")
        data[key] = val.split(",") if key == "on" else val
    return data


def _triggers(value: Any) -> tuple[Trigger, ...]:
    if value is None:
        value = list(ENDS)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not value:
        raise BadTarget(f"on: expected a list of events, got {value!r}")
    triggers = []
    for word in value:
        if not isinstance(word, str):
            raise BadTarget(f"on: {word!r} is not an event")
        name, sep, arg = word.strip().partition(":")
        try:
            event = Event(name)
        except ValueError:
            known = ", ".join(e.value for e in Event if e is not Event.DURATION)
            raise BadTarget(
                f"on: unknown event {word!r}: choose from {known}, duration:2h"
            ) from None
        if (event is Event.DURATION) != bool(sep):
            raise BadTarget(
                f"on: {word!r}: only duration takes a threshold, as duration:90m"
                if sep
                else "on: duration needs a threshold, as duration:2h"
            )
        triggers.append(Trigger(event, parse_duration(arg) if sep else None))
    return tuple(dict.fromkeys(triggers))


def parse_duration(text: str) -> float:
    """``90s``, ``30m``, ``2h``, ``1.5d`` or a number of seconds."""
    try:
        seconds = float(text)
    except ValueError:
        match = _DURATION.fullmatch(text.strip())
        if match is None:
            raise BadTarget(
                f"on: duration {text!r}: expected a time like 90s, 30m, 2h or 1d"
            ) from None
        seconds = float(match[1]) * _UNITS[match[2]]
    if not seconds > 0:
        raise BadTarget(f"on: duration {text!r} must be more than 0")
    return seconds


def _seconds(seconds: float) -> str:
    for unit in ("d", "h", "m"):
        if seconds >= _UNITS[unit] and seconds % _UNITS[unit] == 0:
            return f"{int(seconds // _UNITS[unit])}{unit}"
    return f"{seconds:g}s"


def _url(address: str) -> str:
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in address):
        raise BadTarget("webhook: the URL holds a space or a control character")
    parts = urlsplit(address)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = shown_url(address) if parts.hostname else "the value"
        raise BadTarget(f"webhook: {shown} is not an http(s) URL")
    return address


def _format(fmt: Any, url: str) -> WebhookFormat:
    if fmt is None:
        host = urlsplit(url).hostname or ""
        if host == "hooks.slack.com":
            return WebhookFormat.SLACK
        if host.endswith((".webhook.office.com", ".logic.azure.com", ".powerplatform.com")):
            return WebhookFormat.TEAMS
        return WebhookFormat.GENERIC
    try:
        return WebhookFormat(fmt)
    except ValueError:
        raise BadTarget(f"format: {fmt!r}: choose generic, slack or teams") from None
