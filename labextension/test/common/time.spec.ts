import {
  elapsedUnit,
  formatClock,
  formatDateTime,
  formatDuration
} from '../../src/common/time';

/** Unix ms of a local wall-clock time (the time zone jest runs in). */
const local = (h: number, m: number, s: number, ms = 0): number =>
  new Date(2026, 10, 30, h, m, s, ms).getTime();

describe('every time the front end shows', () => {
  it('is written 24-hour, whatever the locale would say', () => {
    expect(formatClock(local(19, 0, 20))).toBe('19:00:20');
    expect(formatClock(local(7, 5, 9))).toBe('07:05:09');
    expect(formatClock(local(0, 0, 0))).not.toMatch(/AM|PM|12:/);
  });

  it('to the minute, second or millisecond asked for', () => {
    const t = local(19, 0, 20, 250);
    expect(formatClock(t, 'minutes')).toBe('19:00');
    expect(formatClock(t, 'seconds')).toBe('19:00:20');
    expect(formatClock(t, 'milliseconds')).toBe('19:00:20.250');
  });

  it('reads numbers that already encode wall-clock time in UTC when told', () => {
    expect(formatClock(Date.UTC(2026, 10, 30, 19, 5), 'minutes', true)).toBe(
      '19:05'
    );
  });

  it('puts the date first, as ISO does', () => {
    expect(formatDateTime(local(9, 3, 1))).toBe('2026-11-30 09:03:01');
  });
});

describe('durations', () => {
  it('say seconds below a minute, else minutes', () => {
    expect(formatDuration(1)).toBe('1 second');
    expect(formatDuration(30)).toBe('30 seconds');
    expect(formatDuration(60)).toBe('1 minute');
    expect(formatDuration(90)).toBe('1.5 minutes');
    expect(formatDuration(300)).toBe('5 minutes');
  });

  it('on an axis, use the unit that keeps the numbers small', () => {
    expect(elapsedUnit(45_000).label).toBe('s');
    expect(elapsedUnit(120_000).label).toBe('s');
    expect(elapsedUnit(20 * 60_000)).toEqual({ label: 'min', ms: 60_000 });
    expect(elapsedUnit(3 * 3_600_000)).toEqual({ label: 'h', ms: 3_600_000 });
  });
});
