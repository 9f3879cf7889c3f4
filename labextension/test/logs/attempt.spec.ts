import { attemptNotes } from '../../src/logs/attempt';
import type { IAttempt } from '../../src/logs/types';

const attempt = (extra: Partial<IAttempt>): IAttempt => ({
  attempt: 2,
  status: 'SUCCEEDED',
  run_id: 'r2',
  started: 1,
  ended: 2,
  exit_codes: [0, 0],
  failed_rank: null,
  message: null,
  run_url: null,
  nodes: [],
  resumed_from: null,
  resumed_step: null,
  progress: null,
  hang: null,
  ...extra
});

describe('attemptNotes', () => {
  it("says a failed attempt's cause", () => {
    const oom =
      'rank 1 was killed by the out-of-memory killer (SIGKILL): 23.1 GiB resident';
    expect(
      attemptNotes(attempt({ status: 'FAILED', message: oom, failed_rank: 1 }))
    ).toEqual({ cause: oom, resumed: null });
  });

  it('says where a retry resumed from, with its step when known', () => {
    const resumed = attemptNotes(
      attempt({ resumed_from: '/ckpt/checkpoint-400', resumed_step: 400 })
    );
    expect(resumed).toEqual({
      cause: null,
      resumed: 'Resumed from /ckpt/checkpoint-400, step 400'
    });
    expect(
      attemptNotes(attempt({ resumed_from: '/ckpt/last.ckpt' })).resumed
    ).toBe('Resumed from /ckpt/last.ckpt');
  });

  it('says nothing of a fresh attempt, a cancelled one, or none', () => {
    expect(attemptNotes(attempt({}))).toEqual({ cause: null, resumed: null });
    expect(
      attemptNotes(attempt({ status: 'CANCELLED', message: 'cancelled' })).cause
    ).toBeNull();
    expect(attemptNotes(undefined)).toEqual({ cause: null, resumed: null });
  });
});
