"""Secrets out of what is shown of a job: the credentials of URLs, the values of
secret-looking flags (``--token x``), environment assignments (``API_KEY=x``) and
``Authorization`` headers in command lines and messages.

Everything that shows a job (the REST documents, ``air get`` / ``air list``, the run
links, the MLflow tags) goes through here; what runs keeps the real values (the ranks'
``MLFLOW_TRACKING_URI`` and environment), which stay in the job store, private to its
user. The rules are deliberately broad: a flag that only looks secret loses its value
in what is shown, never in what runs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

MASK = "***"

#: A name is secret when one of its ``_``/``-`` separated parts is one of these.
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:token|secret|password|passwd|credentials?|auth|authorization|cookie"
    r"|api_?key|access_?key|private_?key|secret_?key|signing_?key|connection_?string)(?:_|$)"
)
_VALUE = r"(?:\"[^\"]*\"|'[^']*'|[^\s\"'&;]+)"
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#]+@")
_FLAG = re.compile(
    rf"(?<![\w-])(?P<flag>--?(?P<name>[A-Za-z][\w-]*))(?P<sep>=|\s+)(?P<value>{_VALUE})"
)
_ASSIGNMENT = re.compile(rf"(?<![\w-])(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>{_VALUE})")
_HEADER = re.compile(
    r"(?P<head>\bauthorization:\s*(?:(?:bearer|basic|token)\s+)?)[^\s\"']+", re.IGNORECASE
)


def secret_name(name: str) -> bool:
    """Whether a flag or variable called ``name`` likely holds a secret."""
    return bool(_SECRET_NAME.search(name.lower().replace("-", "_")))


def redact(text: str) -> str:
    """``text`` with every secret it visibly holds replaced by ``***``."""
    text = _USERINFO.sub(rf"\g<scheme>{MASK}@", text)
    text = _FLAG.sub(_flag, text)
    text = _ASSIGNMENT.sub(
        lambda m: f"{m['name']}={MASK}" if secret_name(m["name"]) else m[0], text
    )
    return _HEADER.sub(rf"\g<head>{MASK}", text)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line as a list: also the value that follows a secret flag on its own."""
    shown: list[str] = []
    for arg in argv:
        previous = shown[-1] if shown else ""
        flag = re.fullmatch(r"--?([A-Za-z][\w-]*)", previous)
        secret_value = flag is not None and secret_name(flag[1]) and not arg.startswith("-")
        shown.append(MASK if secret_value else redact(arg))
    return shown


def without_userinfo(url: str) -> str:
    """``url`` without ``user:password@``: a link to a page, which the browser
    authenticates to on its own."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _flag(m: re.Match[str]) -> str:
    if not secret_name(m["name"]) or (m["sep"] != "=" and m["value"].startswith("-")):
        return m[0]
    return f"{m['flag']}{m['sep']}{MASK}"
