import {
  formatHours,
  IUsageResponse,
  usageRows,
  usageScope
} from '../../src/gpu/usage';

function usage(all_users: boolean): IUsageResponse {
  return {
    window: '24h',
    since: 1000,
    now: 87400,
    idle_threshold: 5,
    all_users,
    users: [
      {
        user: 'alice',
        gpu_hours: 5.5,
        idle_gpu_hours: 3,
        jobs: [
          {
            job: '20261206-110000-a1b2c3',
            name: 'train',
            gpus: 2,
            gpu_hours: 4,
            idle_gpu_hours: 2
          },
          {
            job: '20261206-150000-d4e5f6',
            name: null,
            gpus: 1,
            gpu_hours: 1.5,
            idle_gpu_hours: 1
          }
        ]
      }
    ]
  };
}

describe('the usage view', () => {
  it('lists each user then their jobs, by short id and run name', () => {
    expect(usageRows(usage(false))).toEqual([
      {
        kind: 'user',
        label: 'alice',
        title: 'alice',
        gpus: '',
        hours: '5.5',
        idle: '3'
      },
      {
        kind: 'job',
        label: 'a1b2c3 train',
        title: 'job 20261206-110000-a1b2c3',
        gpus: '2',
        hours: '4',
        idle: '2'
      },
      {
        kind: 'job',
        label: 'd4e5f6',
        title: 'job 20261206-150000-d4e5f6',
        gpus: '1',
        hours: '1.5',
        idle: '1'
      }
    ]);
  });

  it('rounds GPU-hours to two decimals', () => {
    expect(formatHours(0.123456)).toBe('0.12');
    expect(formatHours(12)).toBe('12');
  });

  it("says whose jobs it shows: the caller's, or everyone's for an admin", () => {
    expect(usageScope(usage(false))).toBe(
      'Your jobs; idle: under 5 % utilization'
    );
    expect(usageScope(usage(true))).toMatch(
      /^Every user's jobs \(you are a Hub admin\)/
    );
  });
});
