"""Who may do what with a job: levels, grants, identities and the check.

The levels are the managed product's: CAN_VIEW (see the job, its logs and GPUs),
CAN_MANAGE_RUN (also cancel it), CAN_MANAGE (also change its permissions). The owner
holds CAN_MANAGE and cannot be removed. A grant names a user or a group; an identity
is a user name and the groups it belongs to (JupyterHub's on a Hub, the OS's for the CLI).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..identity import Identity


class Level(enum.IntEnum):
    CAN_VIEW = 1
    CAN_MANAGE_RUN = 2
    CAN_MANAGE = 3


KINDS = ("user", "group")

#: A user or group name as JupyterHub and the OS write them, without the separator ':'.
NAME = re.compile(r"[A-Za-z0-9_.@+-]{1,128}")


class BadGrant(ValueError):
    """A grant or a principal that cannot be understood."""


class Forbidden(PermissionError):
    """The identity lacks ``needed`` on the job; ``owner`` is who can grant it."""

    def __init__(self, job_id: str, needed: Level, owner: str) -> None:
        self.job_id, self.needed, self.owner = job_id, needed, owner
        super().__init__(
            f"You don't have {needed.name} on job {job_id}: its owner, {owner}, can grant it"
        )


class OwnerOnly(Forbidden):
    """Only the job's owner may do this, whatever grant the caller holds."""

    def __init__(self, job_id: str, owner: str, what: str) -> None:
        super().__init__(job_id, Level.CAN_MANAGE, owner)
        self.args = (f"Only the owner of job {job_id}, {owner}, can {what}",)


@dataclass(frozen=True)
class Principal:
    kind: str  # "user" or "group"
    name: str

    def __str__(self) -> str:
        return self.name if self.kind == "user" else f"group:{self.name}"


@dataclass(frozen=True)
class Grant:
    principal: Principal
    level: Level

    def as_json(self) -> dict[str, str]:
        return {"kind": self.principal.kind, "name": self.principal.name, "level": self.level.name}

    def __str__(self) -> str:
        return f"{self.principal}:{self.level.name}"


@dataclass(frozen=True)
class JobAccess:
    """A job's owner and grants: everything the check needs."""

    job_id: str
    owner: str
    grants: tuple[Grant, ...] = ()

    def level_of(self, who: Identity) -> Level | None:
        """The highest level ``who`` holds, None when none."""
        if who.name == self.owner:
            return Level.CAN_MANAGE
        held = [
            g.level
            for g in self.grants
            if (g.principal.kind == "user" and g.principal.name == who.name)
            or (g.principal.kind == "group" and g.principal.name in who.groups)
        ]
        return max(held, default=None)

    def require(self, who: Identity, needed: Level) -> None:
        level = self.level_of(who)
        if level is None or level < needed:
            raise Forbidden(self.job_id, needed, self.owner)


def parse_level(text: str) -> Level:
    try:
        return Level[text.strip().upper().replace(" ", "_")]
    except KeyError:
        names = ", ".join(level.name for level in Level)
        raise BadGrant(f"unknown permission level {text!r}: one of {names}") from None


def parse_principal(text: str) -> Principal:
    """``carol`` or ``user:carol`` (a user), ``group:ml-team`` (a group)."""
    kind, sep, name = text.partition(":")
    if not sep:
        kind, name = "user", kind
    return principal(kind.strip(), name.strip())


def principal(kind: str, name: str) -> Principal:
    if kind not in KINDS:
        raise BadGrant(f"a grant names a 'user' or a 'group', not {kind!r}")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise BadGrant(f"{name!r} is not a {kind} name (letters, digits and '_.@+-', at most 128)")
    return Principal(kind, name)


def parse_grant(text: str) -> Grant:
    """``bob:CAN_VIEW``, ``user:bob:CAN_VIEW`` or ``group:ml-team:CAN_MANAGE_RUN``."""
    who, sep, level = text.strip().rpartition(":")
    if not sep or not who or who.strip() in KINDS:  # "bob", "group:ml-team": no level
        raise BadGrant(
            f"{text!r} is not a grant: write NAME:LEVEL or group:NAME:LEVEL, e.g. bob:CAN_VIEW"
        )
    return Grant(parse_principal(who), parse_level(level))


def grant_from_json(doc: Any) -> Grant:
    """``{"kind", "name", "level"}`` (docs/api.md); also the text form, for workload files."""
    if isinstance(doc, str):
        return parse_grant(doc)
    if not isinstance(doc, Mapping) or set(doc) - {"kind", "name", "level"}:
        raise BadGrant(f'a grant is {{"kind", "name", "level"}}, got {doc!r}')
    level = doc.get("level")
    if not isinstance(level, str):
        raise BadGrant(f"a grant needs a 'level', got {doc!r}")
    return Grant(principal(doc.get("kind", "user"), doc.get("name", "")), parse_level(level))


def principal_from_json(doc: Any) -> Principal:
    if isinstance(doc, str):
        return parse_principal(doc)
    if not isinstance(doc, Mapping) or set(doc) - {"kind", "name"}:
        raise BadGrant(f'a principal is {{"kind", "name"}}, got {doc!r}')
    return principal(doc.get("kind", "user"), doc.get("name", ""))


def merged(grants: Iterable[Grant]) -> tuple[Grant, ...]:
    """One grant per principal: the last given wins (a grant replaces an earlier level)."""
    by_principal = {g.principal: g for g in grants}
    return tuple(by_principal.values())


def check_change(owner: str, grants: Iterable[Grant], revoke: Iterable[Principal]) -> None:
    """The owner holds CAN_MANAGE for good: granting or revoking them is refused."""
    for p in [g.principal for g in grants] + list(revoke):
        if p == Principal("user", owner):
            raise BadGrant(f"{owner} owns the job: the owner's CAN_MANAGE cannot be changed")
