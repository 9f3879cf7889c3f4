/**
 * The state of the Schedules view: the schedules the caller may see, each
 * with its last runs, and the actions on them (pause, resume, run now,
 * delete). Polls while a view is shown, so that fired runs and their tasks'
 * statuses show up.
 */

import type { Requester } from '../common/api';
import {
  describeError,
  FetchKind,
  PollingModel,
  pollFrequency
} from '../common/model';
import type { ISchedule, IScheduleRun, Level } from './types';

/** What a button of a schedule does; each is one POST (or the DELETE). */
export type ScheduleAction = 'pause' | 'resume' | 'run-now' | 'delete';

/** The level each action needs, as the routes check it. */
const NEEDED: Record<ScheduleAction, Level> = {
  pause: 'CAN_MANAGE',
  resume: 'CAN_MANAGE',
  'run-now': 'CAN_MANAGE_RUN',
  delete: 'CAN_MANAGE'
};
const RANK: Record<Level, number> = {
  CAN_VIEW: 1,
  CAN_MANAGE_RUN: 2,
  CAN_MANAGE: 3
};

/** Whether the caller's level on `schedule` allows `action` (the server checks again). */
export function allows(schedule: ISchedule, action: ScheduleAction): boolean {
  return RANK[schedule.level] >= RANK[NEEDED[action]];
}

export class SchedulesModel extends PollingModel {
  constructor(options: SchedulesModel.IOptions) {
    super({
      name: 'jupyter-air:schedules',
      frequency: pollFrequency(options.interval ?? 10),
      idleTimeout: options.idleTimeout ?? 300,
      document: options.document
    });
    this._request = options.request;
  }

  /** Seconds between two polls while shown. */
  set pollInterval(seconds: number) {
    this.frequency = pollFrequency(seconds);
  }

  /** The schedules the caller may see, by name; null until the first answer. */
  get schedules(): readonly ISchedule[] | null {
    return this._schedules;
  }

  /** The schedule with this id, if listed. */
  schedule(id: string): ISchedule | undefined {
    return this._schedules?.find(s => s.id === id);
  }

  /** Whether an action on this schedule is on its way (its buttons wait). */
  isPending(id: string): boolean {
    return this._pending.has(id);
  }

  /** The last action's failure, in words, or null. */
  get actionError(): string | null {
    return this._actionError;
  }

  /** The run that the last "run now" started, so a view can point at it. */
  get startedRun(): IScheduleRun | null {
    return this._startedRun;
  }

  /** Note a schedule made elsewhere (the form) at once, before the next poll. */
  added(schedule: ISchedule): void {
    const others = (this._schedules ?? []).filter(s => s.id !== schedule.id);
    this._schedules = sortByName([...others, schedule]);
    this.emitChanged();
    this.poll();
  }

  /**
   * Run an action; the list is read again after it. A refusal (a 403, a
   * schedule deleted meanwhile) is kept in `actionError` and not thrown, since
   * a button has nobody to throw to.
   */
  async act(id: string, action: ScheduleAction): Promise<void> {
    const path = `schedules/${encodeURIComponent(id)}`;
    await this._acting(id, async () => {
      if (action === 'delete') {
        await this._request<void>(path, { method: 'DELETE' });
        this._schedules = (this._schedules ?? []).filter(s => s.id !== id);
      } else if (action === 'run-now') {
        this._startedRun = await this._request<IScheduleRun>(
          `${path}/run-now`,
          { method: 'POST', body: '{}' }
        );
      } else {
        this._replace(
          await this._request<ISchedule>(`${path}/${action}`, {
            method: 'POST',
            body: '{}'
          })
        );
      }
    });
  }

  /**
   * Re-run a run's failed and cancelled tasks, and those skipped after them,
   * inside the same run (CAN_MANAGE_RUN, as "run now"); refusals as for `act`.
   */
  async repair(scheduleId: string, runId: number): Promise<void> {
    await this._acting(scheduleId, async () => {
      await this._request<IScheduleRun>(`schedule-runs/${runId}/repair`, {
        method: 'POST',
        body: JSON.stringify({ rerun_all_failed: true })
      });
    });
  }

  protected async fetch(_kind: FetchKind): Promise<void> {
    const answer = await this._request<{ schedules: ISchedule[] }>('schedules');
    this._schedules = sortByName(answer.schedules);
  }

  /** One action on a schedule at a time; the list is read again after it. */
  private async _acting(
    id: string,
    action: () => Promise<void>
  ): Promise<void> {
    if (this._pending.has(id)) {
      return;
    }
    this._pending.add(id);
    this._actionError = null;
    this.emitChanged();
    try {
      await action();
    } catch (error) {
      this._actionError = describeError(error);
    } finally {
      this._pending.delete(id);
      this.emitChanged();
    }
    await this.refresh().catch(() => undefined);
  }

  private _replace(schedule: ISchedule): void {
    this._schedules = (this._schedules ?? []).map(s =>
      s.id === schedule.id ? schedule : s
    );
  }

  private _request: Requester;
  private _schedules: ISchedule[] | null = null;
  private _pending = new Set<string>();
  private _actionError: string | null = null;
  private _startedRun: IScheduleRun | null = null;
}

function sortByName(schedules: ISchedule[]): ISchedule[] {
  return [...schedules].sort(
    (a, b) => a.name.localeCompare(b.name) || a.owner.localeCompare(b.owner)
  );
}

export namespace SchedulesModel {
  export interface IOptions {
    request: Requester;
    /** Seconds between two polls while shown (default 10). */
    interval?: number;
    /** Seconds without activity before polling pauses (default 300). */
    idleTimeout?: number;
    document?: Document;
  }
}
