import { hangLines, stacksAsText } from '../../src/logs/stacks';
import type { IStackSet } from '../../src/logs/types';

const SET: IStackSet = {
  attempt: 2,
  name: '20261206-040000-abcdef',
  reason: 'asked for',
  time: new Date(2026, 11, 6, 4, 0, 0).getTime() / 1000,
  ranks: [
    {
      rank: 0,
      node: 0,
      pid: 6569,
      text:
        'Thread \x1b[33m\x1b[1m6569\x1b[0m (idle)\n' +
        '    \x1b[32mclock_nanosleep\x1b[0m (\x1b[36mlibc.so.6\x1b[0m)\n',
      error: null
    },
    { rank: 1, node: 0, pid: 6570, text: null, error: 'process gone' }
  ],
  hang: null
};

describe('stacksAsText', () => {
  it('words the stacks as `air stacks` does, without a single escape', () => {
    const text = stacksAsText([SET]);
    expect(text).toBe(
      [
        'Stacks of attempt 2, 2026-12-06 04:00:00 (asked for)',
        '',
        '=== node 0 rank 0 (pid 6569) ===',
        'Thread 6569 (idle)',
        '    clock_nanosleep (libc.so.6)',
        '',
        '=== node 0 rank 1 (pid 6570) ===',
        'not read: process gone',
        ''
      ].join('\n')
    );
    expect(text).not.toContain('\x1b');
  });

  it('names the collective the ranks wait in before their stacks', () => {
    const hung: IStackSet = {
      ...SET,
      hang: {
        kind: 'absent',
        line:
          'rank 0 waits in all_reduce #5 (float32[1024], gloo); rank 1 never ' +
          'entered it: its last collective was #4 (broadcast)',
        details: [
          'rank 0: waits in all_reduce #5 (float32[1024], gloo) for 12 s',
          'rank 1: never entered it; last collective #4 (broadcast)'
        ],
        group: '0',
        seq: 5,
        op: 'all_reduce',
        waiting: [0],
        culprits: [1]
      }
    };
    const lines = stacksAsText([hung]).split('\n');
    expect(lines.slice(0, 4)).toEqual([
      'Stacks of attempt 2, 2026-12-06 04:00:00 (asked for)',
      'Collectives: rank 0 waits in all_reduce #5 (float32[1024], gloo); ' +
        'rank 1 never entered it: its last collective was #4 (broadcast)',
      '    rank 0: waits in all_reduce #5 (float32[1024], gloo) for 12 s',
      '    rank 1: never entered it; last collective #4 (broadcast)'
    ]);
    expect(hangLines(SET)).toEqual([]);
  });
});
