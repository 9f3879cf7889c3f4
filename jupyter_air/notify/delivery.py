"""Sending one message to one target: a mail through the user's SMTP server, a webhook's
POST. Each either returns (delivered) or raises ``Failed``, saying whether a later try
may succeed (a server down, busy or slow) or not (an address refused, a webhook gone).
"""

from __future__ import annotations

import smtplib
import ssl
import urllib.error
import urllib.request
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from .message import Message, encoded, text, webhook_body
from .settings import AirNotify
from .targets import Channel, Target


class Failed(Exception):
    """Not delivered; ``permanent``: trying again would get the same answer."""

    def __init__(self, reason: str, *, permanent: bool = False) -> None:
        super().__init__(reason)
        self.permanent = permanent


def deliver(target: Target, message: Message, key: str, settings: AirNotify) -> None:
    """Send ``message`` to ``target``; ``key`` names this notification across retries (the
    mail's Message-ID, the webhook's ``Idempotency-Key``), so a receiver can drop a copy
    sent again after a crash between the send and its record."""
    if target.channel is Channel.EMAIL:
        send_mail(target.address, message, key, settings)
    elif target.channel is Channel.WEBHOOK:
        post_webhook(target, message, key, settings.timeout)
    # JupyterLab's are read from the outbox by the Jupyter server: nothing to send.


def send_mail(to: str, message: Message, key: str, settings: AirNotify) -> None:
    if not settings.smtp_host:
        raise Failed(
            "no SMTP server configured (c.AirNotify.smtp_host, $AIR_SMTP_HOST)", permanent=True
        )
    mail = EmailMessage()
    mail["Subject"] = " ".join(message.title.split())  # a header is one line
    mail["From"] = settings.smtp_from
    mail["To"] = to
    mail["Date"] = formatdate(localtime=True)
    mail["Message-ID"] = make_msgid(idstring=key.replace(":", "."), domain="jupyter-air")
    mail["Auto-Submitted"] = "auto-generated"  # RFC 3834: no vacation replies to this
    mail.set_content(text(message))
    context = ssl.create_default_context()
    try:
        password = settings.password() if settings.smtp_user else None
    except OSError as err:
        raise Failed(f"SMTP password file: {err.strerror}", permanent=True) from None
    try:
        if settings.smtp_tls == "tls":
            client: smtplib.SMTP = smtplib.SMTP_SSL(
                settings.smtp_host, settings.port, timeout=settings.timeout, context=context
            )
        else:
            client = smtplib.SMTP(settings.smtp_host, settings.port, timeout=settings.timeout)
        with client:
            if settings.smtp_tls == "starttls":
                client.starttls(context=context)
            if settings.smtp_user:
                client.login(settings.smtp_user, password or "")
            client.send_message(mail)
    except smtplib.SMTPAuthenticationError as err:
        raise Failed(f"login refused: {err.smtp_code}", permanent=True) from None
    except smtplib.SMTPRecipientsRefused as err:
        code, _ = next(iter(err.recipients.values()))
        raise Failed(f"recipient refused: {code}", permanent=code >= 500) from None
    except smtplib.SMTPResponseException as err:
        reason = (
            err.smtp_error.decode(errors="replace")
            if isinstance(err.smtp_error, bytes)
            else str(err.smtp_error)
        )
        raise Failed(f"{err.smtp_code} {reason}".strip(), permanent=err.smtp_code >= 500) from None
    except smtplib.SMTPNotSupportedError as err:
        raise Failed(f"the server does not support it: {err}", permanent=True) from None
    except ssl.SSLError as err:
        raise Failed(f"TLS: {err.reason or err}", permanent=True) from None
    except (OSError, smtplib.SMTPException) as err:
        raise Failed(_why(err)) from None


def post_webhook(target: Target, message: Message, key: str, timeout: float) -> None:
    request = urllib.request.Request(
        target.address,
        data=encoded(webhook_body(message, target.format)),
        headers={
            "Content-Type": "application/json; charset=utf-8",
            "Idempotency-Key": key,
            "User-Agent": "jupyter-air",
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read(1024)
    except urllib.error.HTTPError as err:
        # A busy or failing server, or one asking to slow down, may take it later.
        transient = err.code >= 500 or err.code in (408, 425, 429)
        raise Failed(f"HTTP {err.code} {err.reason}", permanent=not transient) from None
    except (OSError, ValueError) as err:
        raise Failed(_why(err)) from None


def _why(err: BaseException) -> str:
    """An error in a few words, never a URL (a webhook's is a secret)."""
    reason = getattr(err, "reason", None)
    if isinstance(reason, BaseException):
        err = reason
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, TimeoutError):
        return "timed out"
    if isinstance(err, smtplib.SMTPServerDisconnected):
        return "the server closed the connection"
    if isinstance(err, ValueError):  # its text may quote the URL, a secret
        return f"the request could not be made ({type(err).__name__})"
    strerror = getattr(err, "strerror", None)
    return str(strerror or err or type(err).__name__)
