"""The cron layer: Quartz's own documented examples, Unix crons, DST days, bad input."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from jupyter_air.schedules.cron import CronError, Dialect, parse

PARIS = ZoneInfo("Europe/Paris")


def fires(expression: str, start: datetime, count: int = 3, tz: str = "UTC") -> list[str]:
    """The next ``count`` fire times after ``start``, as local ISO strings."""
    dialect = Dialect.QUARTZ if len(expression.split()) > 5 else Dialect.UNIX
    cron = parse(expression, dialect, tz)
    return [
        datetime.fromtimestamp(t, cron.tz).isoformat()
        for t in cron.next_times(start.timestamp(), count)
    ]


START = datetime(2002, 1, 1, tzinfo=UTC)  # a Tuesday


# The table of Quartz's CronTrigger tutorial, with the times each example names.
@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # Fire at 12pm (noon) every day
        ("0 0 12 * * ?", ["2002-01-01T12:00:00", "2002-01-02T12:00:00"]),
        # Fire at 10:15am every day (four spellings)
        ("0 15 10 ? * *", ["2002-01-01T10:15:00", "2002-01-02T10:15:00"]),
        ("0 15 10 * * ?", ["2002-01-01T10:15:00", "2002-01-02T10:15:00"]),
        ("0 15 10 * * ? *", ["2002-01-01T10:15:00", "2002-01-02T10:15:00"]),
        # Fire at 10:15am every day during the year 2005
        ("0 15 10 * * ? 2005", ["2005-01-01T10:15:00", "2005-01-02T10:15:00"]),
        # Fire every minute starting at 2pm and ending at 2:59pm, every day
        ("0 * 14 * * ?", ["2002-01-01T14:00:00", "2002-01-01T14:01:00"]),
        # Fire every 5 minutes starting at 2pm and ending at 2:55pm, every day
        ("0 0/5 14 * * ?", ["2002-01-01T14:00:00", "2002-01-01T14:05:00"]),
        # Fire every minute starting at 2pm and ending at 2:05pm, every day
        ("0 0-5 14 * * ?", ["2002-01-01T14:00:00", "2002-01-01T14:01:00"]),
        # Fire at 2:10pm and at 2:44pm every Wednesday in the month of March
        (
            "0 10,44 14 ? 3 WED",
            ["2002-03-06T14:10:00", "2002-03-06T14:44:00", "2002-03-13T14:10:00"],
        ),
        # Fire at 10:15am every Monday, Tuesday, Wednesday, Thursday and Friday
        ("0 15 10 ? * MON-FRI", ["2002-01-01T10:15:00", "2002-01-02T10:15:00"]),
        # Fire at 10:15am on the 15th day of every month
        ("0 15 10 15 * ?", ["2002-01-15T10:15:00", "2002-02-15T10:15:00"]),
        # Fire at 10:15am on the last day of every month
        ("0 15 10 L * ?", ["2002-01-31T10:15:00", "2002-02-28T10:15:00", "2002-03-31T10:15:00"]),
        # Fire at 10:15am on the 2nd-to-last last day of every month
        ("0 15 10 L-2 * ?", ["2002-01-29T10:15:00", "2002-02-26T10:15:00", "2002-03-29T10:15:00"]),
        # Fire at 10:15am on the last Friday of every month
        ("0 15 10 ? * 6L", ["2002-01-25T10:15:00", "2002-02-22T10:15:00", "2002-03-29T10:15:00"]),
        # ... during the years 2002, 2003, 2004 and 2005
        ("0 15 10 ? * 6L 2002-2005", ["2002-01-25T10:15:00", "2002-02-22T10:15:00"]),
        # Fire at 10:15am on the third Friday of every month
        ("0 15 10 ? * 6#3", ["2002-01-18T10:15:00", "2002-02-15T10:15:00", "2002-03-15T10:15:00"]),
        # Fire at 12pm (noon) every 5 days every month, starting on the first day of the month
        ("0 0 12 1/5 * ?", ["2002-01-01T12:00:00", "2002-01-06T12:00:00", "2002-01-11T12:00:00"]),
        # Fire every November 11th at 11:11am
        ("0 11 11 11 11 ?", ["2002-11-11T11:11:00", "2003-11-11T11:11:00"]),
    ],
)
def test_quartz_examples_fire_when_its_documentation_says(
    expression: str, expected: list[str]
) -> None:
    assert fires(expression, START, len(expected)) == [t + "+00:00" for t in expected]


def test_the_6L_example_stops_after_its_last_year() -> None:
    last = datetime(2005, 12, 1, tzinfo=UTC)
    assert fires("0 15 10 ? * 6L 2002-2005", last, 2) == ["2005-12-30T10:15:00+00:00"]


def test_quartz_counts_the_days_of_week_from_sunday_as_1() -> None:
    # 2 = Monday in Quartz (croniter would read it as Tuesday)
    assert fires("0 0 9 ? * 2", START, 1) == ["2002-01-07T09:00:00+00:00"]
    assert fires("0 0 9 ? * 1", START, 1) == ["2002-01-06T09:00:00+00:00"]  # Sunday
    assert fires("0 0 9 ? * 7", START, 1) == ["2002-01-05T09:00:00+00:00"]  # Saturday
    assert fires("0 0 9 ? * 2-6", START, 2) == [  # Monday to Friday
        "2002-01-01T09:00:00+00:00",
        "2002-01-02T09:00:00+00:00",
    ]


def test_nearest_weekday_and_last_weekday_of_the_month() -> None:
    # 2002-06-15 is a Saturday: 15W is Friday the 14th; 2002-03-31 is a Sunday: LW is the 29th
    assert fires("0 0 9 15W * ?", datetime(2002, 6, 1, tzinfo=UTC), 1) == [
        "2002-06-14T09:00:00+00:00"
    ]
    assert fires("0 0 9 LW * ?", datetime(2002, 3, 1, tzinfo=UTC), 1) == [
        "2002-03-29T09:00:00+00:00"
    ]


def test_seconds_field_fires_every_two_seconds() -> None:
    start = datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)
    assert fires("*/2 * * * * ?", start, 3) == [
        "2026-01-01T00:00:02+00:00",
        "2026-01-01T00:00:04+00:00",
        "2026-01-01T00:00:06+00:00",
    ]


def test_unix_five_fields_with_sunday_as_0_or_7() -> None:
    assert fires("30 2 * * *", START, 2) == [
        "2002-01-01T02:30:00+00:00",
        "2002-01-02T02:30:00+00:00",
    ]
    assert (
        fires("0 9 * * 0", START, 1)
        == fires("0 9 * * 7", START, 1)
        == ["2002-01-06T09:00:00+00:00"]
    )


class TestDaylightSavingTime:
    """A daily 02:30 in Europe/Paris on 2026's change days (29 March, 25 October)."""

    def test_spring_the_skipped_0230_fires_once_right_after_the_gap(self) -> None:
        start = datetime(2026, 3, 27, 12, tzinfo=PARIS)
        assert fires("0 30 2 * * ?", start, 3, "Europe/Paris") == [
            "2026-03-28T02:30:00+01:00",
            "2026-03-29T03:00:00+02:00",
            "2026-03-30T02:30:00+02:00",
        ]

    def test_autumn_the_repeated_0230_fires_once(self) -> None:
        start = datetime(2026, 10, 24, 12, tzinfo=PARIS)
        assert fires("30 2 * * *", start, 2, "Europe/Paris") == [
            "2026-10-25T02:30:00+02:00",
            "2026-10-26T02:30:00+01:00",
        ]

    def test_autumn_an_hourly_schedule_fires_in_both_repeated_hours(self) -> None:
        start = datetime(2026, 10, 25, 1, 0, tzinfo=PARIS)
        assert fires("0 30 * * * ?", start, 3, "Europe/Paris") == [
            "2026-10-25T01:30:00+02:00",
            "2026-10-25T02:30:00+02:00",
            "2026-10-25T02:30:00+01:00",
        ]

    def test_times_are_a_day_apart_in_local_time_not_in_utc(self) -> None:
        start = datetime(2026, 3, 27, 12, tzinfo=PARIS)
        cron = parse("0 0 9 * * ?", Dialect.QUARTZ, "Europe/Paris")
        a, b, c = cron.next_times(start.timestamp(), 3)
        assert b - a == 23 * 3600  # 28 March 09:00 CET -> 29 March 09:00 CEST
        assert c - b == 24 * 3600
        assert {datetime.fromtimestamp(t, PARIS).hour for t in (a, b, c)} == {9}


def test_times_between_keeps_the_latest_and_counts_the_rest() -> None:
    cron = parse("*/2 * * * * ?", Dialect.QUARTZ)
    start = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    kept, dropped = cron.times_between(start, start + 20, limit=3)
    assert kept == [start + 16, start + 18, start + 20]
    assert dropped == 7


def test_describe_says_the_cron_in_words_with_its_zone() -> None:
    cron = parse("0 30 2 * * ?", Dialect.QUARTZ, "Europe/Paris")
    assert cron.describe() == "At 02:30, every day (Europe/Paris)"
    assert "Friday" in parse("0 15 10 ? * 6L", Dialect.QUARTZ).describe()  # 6 = FRI in Quartz
    assert "Saturday" in parse("0 9 * * 6", Dialect.UNIX).describe()  # 6 = SAT in Unix


@pytest.mark.parametrize(
    ("expression", "dialect", "words"),
    [
        ("* * * * *", Dialect.UNIX, "Every minute"),
        ("*/5 * * * *", Dialect.UNIX, "Every 5 minutes"),
        ("0 * * * *", Dialect.UNIX, "Every hour"),
        ("0 */2 * * *", Dialect.UNIX, "Every 2 hours"),
        ("0 2 * * *", Dialect.UNIX, "At 02:00, every day"),
        ("0 0,12 * * *", Dialect.UNIX, "At 00:00 and 12:00, every day"),
        ("*/5 2 * * *", Dialect.UNIX, "Every 5 minutes, between 02:00 and 02:59, every day"),
        ("0 2 * * 1-5", Dialect.UNIX, "At 02:00, Monday through Friday"),
        ("15 3 1 * *", Dialect.UNIX, "At 03:15, on day 1 of the month"),
        ("*/2 * * * * ?", Dialect.QUARTZ, "Every 2 seconds"),
        ("0 0 9 ? * MON-FRI", Dialect.QUARTZ, "At 09:00, Monday through Friday"),
        ("0 0 12 LW * ?", Dialect.QUARTZ, "At 12:00, on the last weekday of the month"),
    ],
)
def test_common_crons_read_as_a_person_would_say_them(
    expression: str, dialect: Dialect, words: str
) -> None:
    """Each unrestricted field is not spelled out ("every minute, every hour, every
    day"); a time of day on every day says so."""
    assert parse(expression, dialect).describe() == f"{words} (UTC)"


@pytest.mark.parametrize(
    ("expression", "dialect", "said"),
    [
        ("0 61 10 * * ?", Dialect.QUARTZ, "the minutes field '61'"),
        ("0 15 25 * * ?", Dialect.QUARTZ, "the hours field '25'"),
        ("0 15 10 32 * ?", Dialect.QUARTZ, "the day-of-month field '32'"),
        ("0 15 10 ? 13 *", Dialect.QUARTZ, "the month field '13'"),
        ("0 15 10 ? * 8", Dialect.QUARTZ, "day-of-week 8 is out of range"),
        ("0 15 10 ? * 0", Dialect.QUARTZ, "day-of-week 0 is out of range"),
        ("0 15 10 * * *", Dialect.QUARTZ, "exactly one of them must be '?'"),
        ("0 15 10 ? * ?", Dialect.QUARTZ, "exactly one of them must be '?'"),
        ("? 15 10 * * ?", Dialect.QUARTZ, "'?' stands alone"),
        ("0 15 10 * *", Dialect.QUARTZ, "6 or 7 fields"),
        ("30 2 * * * ?", Dialect.UNIX, "5 fields"),
        ("30 2 * * ?", Dialect.UNIX, "'?' is Quartz syntax"),
        ("61 2 * * *", Dialect.UNIX, "the minutes field '61'"),
        ("", Dialect.UNIX, "empty"),
    ],
)
def test_a_bad_cron_is_refused_naming_the_field(
    expression: str, dialect: Dialect, said: str
) -> None:
    with pytest.raises(CronError) as err:
        parse(expression, dialect)
    assert said in str(err.value)
    assert "\n" not in str(err.value)


def test_an_unknown_time_zone_is_refused() -> None:
    with pytest.raises(CronError, match="unknown time zone 'Europe/Pariss'"):
        parse("30 2 * * *", Dialect.UNIX, "Europe/Pariss")
    with pytest.raises(CronError, match="unknown time zone"):
        parse("30 2 * * *", Dialect.UNIX, "../../etc/passwd")
