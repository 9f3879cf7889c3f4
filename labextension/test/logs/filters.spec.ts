import {
  filterQuery,
  isLevelKey,
  isRangeKey,
  JOB_ID,
  narrows,
  NO_FILTERS
} from '../../src/logs/filters';

describe('filterQuery', () => {
  it('asks for everything without filters', () => {
    expect(filterQuery(NO_FILTERS, 1000)).toEqual({
      attempt: null,
      node: null,
      rank: null,
      cell: null,
      level: null,
      since: null,
      search: null
    });
  });

  it('turns a range into the time it starts, before the end given', () => {
    const query = filterQuery(
      { ...NO_FILTERS, range: '5m', level: 'warning', node: 1, rank: 0 },
      1000.7
    );
    expect(query).toMatchObject({
      since: 700,
      level: 'warning',
      node: 1,
      rank: 0
    });
  });

  it("asks for a session's cell by its number", () => {
    expect(filterQuery({ ...NO_FILTERS, cell: 3 }, 1000).cell).toBe(3);
    expect(narrows({ ...NO_FILTERS, cell: 3 })).toBe(true);
  });

  it('never asks for a time before the epoch', () => {
    expect(filterQuery({ ...NO_FILTERS, range: '1h' }, 10).since).toBe(0);
  });
});

describe('filter keys', () => {
  it('accept only the levels and ranges offered, not inherited names', () => {
    expect(isLevelKey('error')).toBe(true);
    expect(isLevelKey('debug')).toBe(false);
    expect(isLevelKey('constructor')).toBe(false);
    expect(isRangeKey('15m')).toBe(true);
    expect(isRangeKey('toString')).toBe(false);
  });
});

describe('JOB_ID', () => {
  it('accepts the server ids and refuses path tricks', () => {
    expect(JOB_ID.test('a1b2c3d4-0001')).toBe(true);
    expect(JOB_ID.test('../etc')).toBe(false);
    expect(JOB_ID.test('ab')).toBe(false);
  });
});
