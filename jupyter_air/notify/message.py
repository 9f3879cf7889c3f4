"""What a notification says, and its forms: an email's text, a webhook's JSON (ours,
Slack's or Teams'), JupyterLab's toast.

A ``Message`` is built by who knows the facts (``jobs.notices`` for a job,
``schedules.notices`` for a schedule run) and stored with each of its targets in the
outbox, so that a retry sends the same words an hour later.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .targets import Event, WebhookFormat

#: Lines of the failing rank's output a message carries at most.
LAST_LINES = 20


@dataclass(frozen=True)
class Link:
    label: str
    url: str


@dataclass(frozen=True)
class Message:
    event: Event
    #: One line: "air job 20261204-... failed: rank 1 exited with code 1".
    title: str
    #: Severity, as JupyterLab's notifications have it: info, success, warning, error.
    level: str
    owner: str
    #: Label and value lines: what ran, how it ended, how long, where.
    facts: tuple[tuple[str, str], ...] = ()
    #: The last lines of the failing rank (or the hint's own text).
    lines: tuple[str, ...] = ()
    links: tuple[Link, ...] = ()
    #: What shows the logs in a terminal: ``air logs ID``.
    command: str | None = None
    job_id: str | None = None
    schedule_id: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "title", " ".join(self.title.split()))  # one line, always

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["facts"] = [list(f) for f in self.facts]
        data["lines"] = list(self.lines)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Message:
        return cls(
            event=Event(data["event"]),
            title=data["title"],
            level=data["level"],
            owner=data["owner"],
            facts=tuple((str(k), str(v)) for k, v in data.get("facts", ())),
            lines=tuple(data.get("lines", ())),
            links=tuple(Link(**link) for link in data.get("links", ())),
            command=data.get("command"),
            job_id=data.get("job_id"),
            schedule_id=data.get("schedule_id"),
        )


def text(message: Message) -> str:
    """The plain text of a message (an email's body, a log line's source)."""
    out = [message.title, ""]
    width = max((len(k) for k, _ in message.facts), default=0)
    out += [f"{k + ':':<{width + 1}} {v}" for k, v in message.facts]
    if message.lines:
        out += ["", "Last lines:", *(f"    {line}" for line in message.lines)]
    if message.links or message.command:
        out.append("")
    out += [f"{link.label}: {link.url}" for link in message.links]
    if message.command:
        out.append(f"In a terminal: {message.command}")
    return "\n".join(out) + "\n"


def webhook_body(message: Message, fmt: WebhookFormat) -> dict[str, Any]:
    if fmt is WebhookFormat.SLACK:
        return _slack(message)
    if fmt is WebhookFormat.TEAMS:
        return _teams(message)
    return {"source": "jupyter_air", **message.to_json(), "text": text(message)}


def _slack(message: Message) -> dict[str, Any]:
    """Slack's incoming webhook: ``text`` for the notification, blocks for the page."""
    facts = "\n".join(f"*{k}:* {_slack_escape(v)}" for k, v in message.facts)
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{_slack_escape(message.title)}*"}}
    ]
    if facts:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": facts}})
    if message.lines:
        tail = "\n".join(message.lines).replace("```", "'''")
        blocks.append(
            {"type": "section", "text": {"type": "mrkdwn", "text": f"```{tail[-2800:]}```"}}
        )
    links = [f"<{link.url}|{_slack_escape(link.label)}>" for link in message.links]
    if message.command:
        links.append(f"`{message.command}`")
    if links:
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(links)}]}
        )
    return {"text": message.title, "blocks": blocks}


def _slack_escape(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _teams(message: Message) -> dict[str, Any]:
    """A Teams (Workflows) incoming webhook: a message holding one Adaptive Card."""
    body: list[dict[str, Any]] = [
        {"type": "TextBlock", "text": message.title, "weight": "Bolder", "wrap": True},
    ]
    if message.facts:
        body.append(
            {"type": "FactSet", "facts": [{"title": k, "value": v} for k, v in message.facts]}
        )
    if message.lines:
        body.append(
            {
                "type": "TextBlock",
                "text": "\n".join(message.lines),
                "fontType": "Monospace",
                "wrap": True,
            }
        )
    if message.command:
        body.append(
            {"type": "TextBlock", "text": f"In a terminal: {message.command}", "wrap": True}
        )
    card = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
        "actions": [
            {"type": "Action.OpenUrl", "title": link.label, "url": link.url}
            for link in message.links
        ],
    }
    return {
        "type": "message",
        "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "content": card}
        ],
    }


def encoded(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode()


def duration(seconds: float) -> str:
    """``3h 05m``, ``12m 30s``, ``42s``."""
    seconds = round(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h {m:02d}m"
    if m:
        return f"{m}m {s:02d}s"
    return f"{s}s"
