/**
 * What the logs view says of the attempt shown, above its lines: how it ended
 * when it failed (the cause of a rank's death), and the checkpoint it resumed
 * from.
 */

import type { IAttempt } from './types';

export interface IAttemptNotes {
  /** The failed attempt's cause, as `air get` says it; null otherwise. */
  cause: string | null;
  /** "Resumed from <checkpoint>, step N"; null for a fresh start. */
  resumed: string | null;
}

export function attemptNotes(attempt: IAttempt | undefined): IAttemptNotes {
  if (!attempt) {
    return { cause: null, resumed: null };
  }
  const cause =
    attempt.status === 'FAILED' && attempt.message ? attempt.message : null;
  let resumed: string | null = null;
  if (attempt.resumed_from) {
    const step =
      attempt.resumed_step === null ? '' : `, step ${attempt.resumed_step}`;
    resumed = `Resumed from ${attempt.resumed_from}${step}`;
  }
  return { cause, resumed };
}
