import { stacksAsText } from '../../src/logs/stacks';
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
  ]
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
});
