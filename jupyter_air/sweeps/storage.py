"""Where a sweep's study lives when the sweep file names it: ``storage:`` an Optuna RDB URL
(``sqlite:///PATH``, ``postgresql://USER:PASSWORD@HOST/DB``, ``mysql://...``).

The sweep's record stays in AIR_HOME (``store``) and keeps the URL, so that every
command finds the study; the trials live in the study of the sweep's id at that URL,
where Optuna's own tools read them too. A URL may carry a password: it is shown only
masked (``shown``, as MLflow masks a tracking URI's), never logged, and a connection's
error loses it too. A SQLite file the sweep creates is 0600, like AIR_HOME's own store.
SQLAlchemy and Optuna are imported only when a URL is given.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..redact import redact

if TYPE_CHECKING:
    import optuna
    from sqlalchemy.engine import URL

#: The databases Optuna's RDB storage is tested on.
DIALECTS = ("sqlite", "postgresql", "mysql")
EXAMPLE = "sqlite:///PATH or postgresql://USER@HOST/DB"


class BadStorage(ValueError):
    """The URL cannot hold a sweep; the message never holds its password."""


def parse(url: str) -> URL:
    """The URL checked for its form: a database Optuna keeps studies in, a SQLite one a
    file (another process, the sweep's driver, must find it)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise BadStorage(f"not a database URL ({EXAMPLE})") from None
    if parsed.get_backend_name() not in DIALECTS:
        raise BadStorage(
            f"{parsed.get_backend_name()!r} is not a database Optuna keeps studies in: "
            f"{', '.join(DIALECTS)} ({EXAMPLE})"
        )
    if parsed.get_backend_name() == "sqlite" and (
        not parsed.database or parsed.database == ":memory:" or "mode=memory" in url
    ):
        raise BadStorage("a SQLite storage is a file: sqlite:///PATH (not in memory)")
    return parsed


def shown(url: str) -> str:
    """``url`` with its password masked: what may be printed, logged or tagged."""
    try:
        return str(parse(url).render_as_string(hide_password=True))
    except BadStorage:
        return redact(url)


def absolute(url: str, base: Path) -> str:
    """``url`` with a SQLite file's relative path made absolute from ``base`` (the
    sweep's working directory): its driver runs elsewhere."""
    parsed = parse(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database is None:
        return url
    path = Path(parsed.database).expanduser()
    if path.is_absolute() and path == Path(parsed.database):
        return url
    return str(parsed.set(database=str(base / path)).render_as_string(hide_password=False))


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL; None for a server's."""
    parsed = parse(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database is None:
        return None
    return Path(parsed.database)


def connect(url: str) -> optuna.storages.RDBStorage:
    """Optuna's storage at ``url``: a SQLite file created 0600 if missing (its folder
    must exist); ``BadStorage`` naming what failed, never the password."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    path = sqlite_file(url)
    engine: dict[str, Any] = {}
    if path is not None:
        engine = {"connect_args": {"timeout": 30}}
        if not path.parent.is_dir():
            raise BadStorage(f"{path.parent} is not a directory")
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDONLY, 0o600))
        except FileExistsError:
            pass  # the user's own file: its mode is theirs
        except OSError as err:
            raise BadStorage(f"{path}: {err.strerror}") from None
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=engine)
    except (SQLAlchemyError, ImportError, ValueError, RuntimeError) as err:
        raise BadStorage(f"{shown(url)} could not be used: {said(url, err)}") from None


def said(url: str, err: BaseException) -> str:
    """An error of the storage at ``url`` in one line, its password replaced by ``***``
    wherever it shows."""
    said = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    password = parse(url).password
    return said.replace(str(password), "***") if password else said
