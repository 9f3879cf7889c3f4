import { formatOwner } from '../../src/gpu/format';
import { GpuResourcesModel } from '../../src/gpu/model';
import {
  formatActivity,
  formatSpan,
  sessionsOn,
  shortJobId
} from '../../src/gpu/sessions';
import type {
  IGpuProcess,
  IGpuResponse,
  ISessionActivity
} from '../../src/gpu/types';
import { answer } from './answers';

const JOB = '20261202-061203-a1b2c3';

/** An answer at server time `now` whose one GPU holds these processes. */
function at(now: number, processes: IGpuProcess[]): IGpuResponse {
  return answer([now], {
    state: [{ status: 'ok', message: null, processes }]
  });
}

function rank(pid: number, session?: ISessionActivity, job = JOB): IGpuProcess {
  return {
    pid,
    name: 'python',
    mem_mib: 2048,
    owner: { kind: 'job', id: job, name: null, session }
  };
}

function idle(since: number, timeout: number | null = 1800): ISessionActivity {
  return { activity: 'idle', since, cell: 3, idle_timeout_s: timeout };
}

describe('a warm session on a GPU', () => {
  it('is idle since its latest cell ended, with when it stops', () => {
    expect(formatActivity(idle(1000), 1000 + 12 * 60 + 59)).toBe(
      'idle 12 min (stops after 30 min)'
    );
    expect(formatActivity(idle(1000, 0), 1045)).toBe(
      'idle 45 s (no idle timeout)'
    );
    expect(formatActivity(idle(1000, null), 1000 + 2 * 3600)).toBe('idle 2 h');
  });

  it('says which cell it runs while one runs', () => {
    const running: ISessionActivity = {
      activity: 'running',
      since: 1000,
      cell: 4,
      idle_timeout_s: 1800
    };
    expect(formatActivity(running, 5000)).toBe('running cell 4');
  });

  it('writes spans rounded down, never negative (the clocks of two hosts)', () => {
    expect(formatSpan(-3)).toBe('0 s');
    expect(formatSpan(59.9)).toBe('59 s');
    expect(formatSpan(3600 + 5 * 60 + 30)).toBe('1 h 5 min');
  });

  it('is named as a session, by the random tail of its id in its badge', () => {
    expect(formatOwner(rank(1, idle(0)))).toBe(`session ${JOB}`);
    expect(formatOwner(rank(1))).toBe(`job ${JOB}`);
    expect(shortJobId(JOB)).toBe('a1b2c3');
  });
});

describe('GpuResourcesModel with a warm session on its GPU', () => {
  let model: GpuResourcesModel;
  let next: IGpuResponse;

  beforeEach(() => {
    model = new GpuResourcesModel({
      request: async <T>() => next as T,
      settings: { pollInterval: 3600 }
    });
  });
  afterEach(() => model.dispose());

  it('shows an idle session once per GPU however many of its ranks are there', async () => {
    const other = '20261202-070000-ffffff';
    next = at(1000 + 12 * 60, [
      rank(11, idle(1000)),
      rank(12, idle(1000)),
      rank(13, undefined, other)
    ]);
    await model.refresh();
    const [shown, ...more] = sessionsOn(
      model.history.state[0],
      model.history.now
    );
    expect(more).toEqual([]);
    expect(shown).toMatchObject({
      job: JOB,
      idle: true,
      activity: 'idle 12 min (stops after 30 min)',
      badge: 'session a1b2c3 idle 12 min (stops after 30 min)'
    });
    expect(shown.title).toContain(`air cancel ${JOB}`);
  });

  it('follows the session into its next cell, at the server time of each answer', async () => {
    next = at(1100, [rank(11, idle(1000))]);
    await model.refresh();
    expect(
      sessionsOn(model.history.state[0], model.history.now)[0].activity
    ).toBe('idle 1 min (stops after 30 min)');

    next = at(1110, [
      rank(11, {
        activity: 'running',
        since: 1105,
        cell: 4,
        idle_timeout_s: 1800
      })
    ]);
    await model.refresh();
    const [running] = sessionsOn(model.history.state[0], model.history.now);
    expect([running.idle, running.badge]).toEqual([
      false,
      'session a1b2c3 running cell 4'
    ]);
  });
});
