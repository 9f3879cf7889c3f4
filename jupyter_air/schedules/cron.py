"""Cron expressions in a time zone: Quartz (seconds first, 6 or 7 fields) and Unix (5).

croniter iterates them: it is maintained again, computes in the schedule's own time
zone (so a 02:30 schedule stays at 02:30 local across DST changes) and knows ``L``, ``W``
and ``#``. Quartz is translated to what croniter means: ``?`` is ``*``, its day of week
counts 1=SUN..7=SAT where croniter counts 0=SUN..6=SAT, ``6L`` (last Friday) is
croniter's ``L5``; ``L-n`` and ``LW`` in the day of month, which croniter lacks, are
resolved month by month to the day they name.

Around DST changes a schedule fires as Vixie cron does: a wall time skipped in spring
fires at the first instant after the gap (02:30 -> 03:00), and a wall time that occurs
twice in autumn fires once, unless the hour field is ``*`` (then every hour fires).
"""

from __future__ import annotations

import calendar
import enum
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterError

QUARTZ_FIELDS = ("seconds", "minutes", "hours", "day-of-month", "month", "day-of-week", "year")
UNIX_FIELDS = ("minutes", "hours", "day-of-month", "month", "day-of-week")
#: A value each croniter field (seconds first, year last) accepts, to find a bad field.
_NEUTRAL = ("0", "0", "0", "*", "*", "*", "*")
_DOW_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_DOW_TOKEN = re.compile(
    r"^(?P<a>\d+|[A-Za-z]{3})(?:-(?P<b>\d+|[A-Za-z]{3}))?"
    r"(?:(?P<last>L)|#(?P<nth>\d+)|/(?P<step>\d+))?$"
)
_LAST_MINUS = re.compile(r"^L-(\d+)$")
#: How far ahead a time is searched for (a 29 February on a Monday is rare, not absent).
_MAX_YEARS = 60


class CronError(ValueError):
    """A cron expression or time zone that cannot be used; the message names the field."""


class Dialect(enum.StrEnum):
    QUARTZ = "quartz"
    UNIX = "unix"


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``, or a ``CronError`` saying it is not one."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise CronError(
            f"unknown time zone {name!r}: use an IANA name such as Europe/Paris or UTC"
        ) from None


@dataclass(frozen=True)
class Cron:
    """A parsed expression: ``next_times`` and ``times_between`` give its fire times (Unix
    seconds), ``describe`` says it in words."""

    expression: str
    dialect: Dialect
    timezone: str
    _fields: tuple[str, ...] = field(repr=False, compare=False)  # croniter's, seconds first
    _special_dom: str | None = field(repr=False, compare=False)  # L-n or LW

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def next_after(self, t: float) -> float | None:
        """The first fire time strictly after ``t``; None if there is none for decades."""
        start = datetime.fromtimestamp(t, self.tz)
        while True:
            found = self._next(start)
            if found is None:
                return None
            if not self._repeated_wall_time(found):
                return found.timestamp()
            start = found

    def next_times(self, after: float, count: int) -> list[float]:
        times: list[float] = []
        while len(times) < count and (found := self.next_after(after)) is not None:
            times.append(found)
            after = found
        return times

    def times_between(self, after: float, until: float, limit: int) -> tuple[list[float], int]:
        """The last ``limit`` fire times in (after, until], and how many earlier ones there
        were besides (counted, not kept: a week's downtime of a per-second schedule)."""
        kept: list[float] = []
        dropped = 0
        while (found := self.next_after(after)) is not None and found <= until:
            kept.append(found)
            after = found
            if len(kept) > limit:
                kept.pop(0)
                dropped += 1
        return kept, dropped

    def describe(self) -> str:
        """In words, with the time zone: "At 02:30, every day (Europe/Paris)", "Every
        minute (UTC)". cron_descriptor's verbose mode says every unrestricted field
        ("Every minute, every hour, every day"); its terse one drops the days even after
        a time of day ("At 02:30"), so "every day" is added back there alone."""
        from cron_descriptor import ExpressionDescriptor, Options

        options = Options()
        options.use_24hour_time_format = True
        options.verbose = False
        options.day_of_week_start_index_zero = self.dialect is Dialect.UNIX
        try:
            words = ExpressionDescriptor(self.expression, options).get_description()
        except Exception:
            return f"{self.expression} ({self.timezone})"
        if self._at_hours_every_day():
            words += ", every day"
        return f"{words} ({self.timezone})"

    def _at_hours_every_day(self) -> bool:
        """Fires at given hours (not every hour or every n hours) on every day."""
        _, _, hours, dom, month, dow, year = self._fields
        every = ("*", "?")
        days_free = dom in every and month in every and dow in every and year in every
        return days_free and self._special_dom is None and hours not in every and "/" not in hours

    # -- croniter ------------------------------------------------------------------------

    def _next(self, start: datetime) -> datetime | None:
        if self._special_dom is None:
            return _croniter_next(self._fields, start)
        month_start, year, month = start, start.year, start.month
        for _ in range(12 * _MAX_YEARS):
            day = _special_day(self._special_dom, year, month)
            if day is not None:
                fields = (*self._fields[:3], str(day), *self._fields[4:])
                found = _croniter_next(fields, month_start, max_years=1)
                if found is not None and (found.year, found.month) == (year, month):
                    return found
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
            month_start = datetime(year, month, 1, tzinfo=self.tz) - timedelta(seconds=1)
        return None

    def _repeated_wall_time(self, t: datetime) -> bool:
        """A wall time's second occurrence, in the hour a DST end repeats; skipped unless
        the expression fires every hour."""
        if self._fields[2] == "*" or t.fold == 0:
            return False
        return t.replace(fold=0).utcoffset() != t.utcoffset()


def parse(expression: str, dialect: Dialect, timezone: str = "UTC") -> Cron:
    """Check and translate ``expression``; a ``CronError`` names the field at fault."""
    zone(timezone)
    if not isinstance(expression, str) or not expression.strip():
        raise CronError("the cron expression is empty")
    parts = expression.split()
    if dialect is Dialect.QUARTZ:
        if len(parts) not in (6, 7):
            raise CronError(
                f"{expression!r}: a Quartz cron has 6 or 7 fields (seconds minutes hours "
                f"day-of-month month day-of-week [year]), not {len(parts)}"
            )
        fields, special = _from_quartz(parts, expression)
        names = QUARTZ_FIELDS
    else:
        if len(parts) != 5:
            raise CronError(
                f"{expression!r}: a Unix cron has 5 fields (minutes hours day-of-month month "
                f"day-of-week), not {len(parts)}; a Quartz cron goes in quartz_cron_expression"
            )
        if "?" in parts:
            raise CronError(f"{expression!r}: '?' is Quartz syntax (quartz_cron_expression)")
        fields, special = ("0", *parts, "*"), None
        names = ("seconds", *UNIX_FIELDS, "year")
    _check(fields, special, names, expression)
    cron = Cron(" ".join(parts), dialect, timezone, tuple(fields), special)
    return cron


def _from_quartz(parts: list[str], expression: str) -> tuple[tuple[str, ...], str | None]:
    seconds, minutes, hours, dom, month, dow, *rest = parts
    year = rest[0] if rest else "*"
    if "?" in (seconds, minutes, hours, month, year) or any(
        "?" in f and f != "?" for f in (dom, dow)
    ):
        raise CronError(f"{expression!r}: '?' stands alone, in day-of-month or day-of-week")
    if (dom == "?") == (dow == "?"):
        raise CronError(
            f"{expression!r}: day-of-month and day-of-week: exactly one of them must be '?' "
            "(Quartz), e.g. '0 30 2 * * ?' or '0 0 9 ? * MON-FRI'"
        )
    special = dom if _LAST_MINUS.match(dom.upper()) or dom.upper() == "LW" else None
    if special is not None:
        offset = _LAST_MINUS.match(dom.upper())
        if offset and not 0 <= int(offset.group(1)) <= 30:
            raise CronError(f"{expression!r}: day-of-month {dom}: the offset is 0 to 30")
        special = special.upper()
    dom = "*" if dom == "?" else dom
    dow = "*" if dow == "?" else _quartz_dow(dow, expression)
    return (seconds, minutes, hours, "1" if special else dom, month, dow, year), special


def _quartz_dow(text: str, expression: str) -> str:
    """Quartz's day of week (1=SUN..7=SAT, ``6L``, ``6#3``) in croniter's words."""
    if text == "*" or text.startswith("*/"):
        return text
    if text.upper() == "L":
        return "6"  # Quartz: L alone is the last day of the week, Saturday
    out = []
    for token in text.split(","):
        m = _DOW_TOKEN.match(token)
        if m is None:
            raise CronError(f"{expression!r}: day-of-week {token!r} is not a day (1-7, SUN-SAT)")
        a, b = _dow_value(m["a"], expression), m["b"] and _dow_value(m["b"], expression)
        if m["last"]:
            if b:
                raise CronError(f"{expression!r}: day-of-week {token!r}: L follows one day")
            out.append(f"L{a}")
            continue
        piece = a + (f"-{b}" if b else "")
        if m["nth"]:
            piece += f"#{m['nth']}"
        elif m["step"]:
            piece += f"/{m['step']}"
        out.append(piece)
    return ",".join(out)


def _dow_value(text: str, expression: str) -> str:
    if text.isdigit():
        if not 1 <= int(text) <= 7:
            raise CronError(
                f"{expression!r}: day-of-week {text} is out of range: Quartz counts 1 (SUN) "
                "to 7 (SAT)"
            )
        return str(int(text) - 1)
    if text.upper() not in _DOW_NAMES:
        raise CronError(f"{expression!r}: day-of-week {text!r} is not one of SUN..SAT")
    return text.upper()


def _check(fields: tuple[str, ...], special: str | None, names: tuple[str, ...], expr: str) -> None:
    """Refuse what croniter refuses, naming the first field it refuses alone."""
    try:
        croniter(" ".join(fields), second_at_beginning=True)
        return
    except (CroniterError, ValueError, KeyError) as err:
        problem = str(err)
    for i, value in enumerate(fields):
        probe = list(_NEUTRAL)
        probe[i] = value
        try:
            croniter(" ".join(probe), second_at_beginning=True)
        except (CroniterError, ValueError, KeyError):
            raise CronError(f"{expr!r}: the {names[i]} field {value!r} is not valid") from None
    raise CronError(f"{expr!r}: {problem}")


def _croniter_next(
    fields: tuple[str, ...], start: datetime, max_years: int = _MAX_YEARS
) -> datetime | None:
    try:
        it = croniter(
            " ".join(fields),
            start,
            second_at_beginning=True,
            ret_type=datetime,
            max_years_between_matches=max_years,
        )
        found: datetime = it.get_next(datetime)
    except CroniterError:  # nothing within max_years (a year field in the past)
        return None
    return found


def _special_day(special: str, year: int, month: int) -> int | None:
    """The day of the month ``L-n`` or ``LW`` names; None when the month has none."""
    last = calendar.monthrange(year, month)[1]
    if special == "LW":
        weekday = calendar.weekday(year, month, last)  # 5 = Saturday, 6 = Sunday
        return last - max(0, weekday - 4)
    m = _LAST_MINUS.match(special)
    assert m is not None
    day = last - int(m.group(1))
    return day if day >= 1 else None
