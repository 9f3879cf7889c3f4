import { APIError } from '../../src/common/api';
import type { Query } from '../../src/common/api';
import { ScheduleForm, defaultName } from '../../src/schedules/form';
import {
  formatFireTime,
  relativeTime,
  sweepLine,
  taskStages
} from '../../src/schedules/format';
import { allows, SchedulesModel } from '../../src/schedules/model';
import type {
  ISchedule,
  IScheduleRun,
  ITask,
  Level
} from '../../src/schedules/types';
import { sleep, until } from '../helpers';

function task(key: string, depends_on: string[] = []): ITask {
  return {
    task_key: key,
    kind: 'workload',
    depends_on,
    run_if: 'ALL_SUCCESS',
    experiment_name: null,
    notebook: null,
    command: 'python prep.py',
    sweep: null
  };
}

function schedule(
  id: string,
  name: string,
  level: Level = 'CAN_MANAGE'
): ISchedule {
  return {
    id,
    name,
    owner: 'ada',
    level,
    cron: {
      expression: '0 30 2 * * ?',
      kind: 'quartz',
      timezone: 'Europe/Paris',
      words: 'every day at 02:30 Europe/Paris'
    },
    pause_status: 'UNPAUSED',
    max_concurrent_runs: 1,
    catch_up: 'latest',
    next_fire_times: ['2026-12-02T02:30:00+01:00'],
    created: 1,
    updated: 1,
    tasks: [task('prep'), task('train', ['prep'])],
    last_runs: []
  };
}

interface ICall {
  endPoint: string;
  method: string;
  body: unknown;
  query: Query;
}

/** Answers like the schedules routes, for two schedules of ada's. */
class FakeServer {
  calls: ICall[] = [];
  schedules = [schedule('s2', 'weekly'), schedule('s1', 'nightly')];
  /** Refuse the next POST with this error. */
  refuse: APIError | null = null;
  /** Hold preview answers until released (to answer them out of order). */
  held: (() => void)[] = [];
  holdPreviews = false;

  request = async <T>(
    endPoint: string,
    init: RequestInit = {},
    query: Query = {}
  ): Promise<T> => {
    const method = init.method ?? 'GET';
    const body = init.body ? JSON.parse(String(init.body)) : undefined;
    this.calls.push({ endPoint, method, body, query });
    if (method !== 'GET' && this.refuse) {
      const error = this.refuse;
      this.refuse = null;
      throw error;
    }
    if (endPoint === 'schedules' && method === 'GET') {
      return { schedules: this.schedules } as T;
    }
    if (endPoint === 'schedules/preview') {
      if (this.holdPreviews) {
        await new Promise<void>(resolve => this.held.push(resolve));
      }
      if (String(query.cron).startsWith('61')) {
        throw new APIError(
          "bad cron '61 * * * *': minute 61 is out of range 0-59",
          'bad_request',
          400
        );
      }
      return {
        kind: 'unix',
        words: `words of ${query.cron} ${query.timezone}`,
        next_fire_times: ['2026-12-02T02:00:00Z']
      } as T;
    }
    if (endPoint === 'schedules' && method === 'POST') {
      const made = { ...schedule('s3', body.name), owner: 'ada' };
      this.schedules = [...this.schedules, made];
      return made as T;
    }
    if (endPoint.startsWith('schedule-runs/')) {
      const run = Number(endPoint.split('/')[1]);
      if (run !== 7) {
        throw new APIError(
          `schedule run ${run} is still running`,
          'conflict',
          409
        );
      }
      return { id: run, tasks: [] } as unknown as T;
    }
    const [, id, action] = endPoint.split('/');
    const found = this.schedules.find(s => s.id === id)!;
    if (method === 'DELETE') {
      this.schedules = this.schedules.filter(s => s !== found);
      return undefined as T;
    }
    if (action === 'pause' || action === 'resume') {
      found.pause_status = action === 'pause' ? 'PAUSED' : 'UNPAUSED';
      return { ...found } as T;
    }
    if (action === 'run-now') {
      const run: IScheduleRun = {
        id: 7,
        schedule_id: id,
        scheduled_time: '2026-12-01T10:00:00Z',
        trigger: 'RUN_NOW',
        status: 'RUNNING',
        message: null,
        created: 1,
        ended: null,
        tasks: []
      };
      return run as T;
    }
    throw new Error(`unexpected ${method} ${endPoint}`);
  };

  sent(method: string): ICall[] {
    return this.calls.filter(c => c.method === method);
  }
}

describe('SchedulesModel', () => {
  let server: FakeServer;
  let model: SchedulesModel;
  beforeEach(() => {
    server = new FakeServer();
    model = new SchedulesModel({ request: server.request, interval: 3600 });
  });
  afterEach(() => model.dispose());

  it('asks nothing until shown, then lists the schedules by name', async () => {
    await sleep(50);
    expect(server.calls).toEqual([]);
    model.active = true;
    await until(() => model.schedules !== null);
    expect(model.schedules!.map(s => s.name)).toEqual(['nightly', 'weekly']);
  });

  it('pauses and resumes a schedule, showing the answer and reading the list again', async () => {
    model.active = true;
    await until(() => model.schedules !== null);
    const action = model.act('s1', 'pause');
    expect(model.isPending('s1')).toBe(true);
    await action;
    expect(model.isPending('s1')).toBe(false);
    expect(model.schedule('s1')!.pause_status).toBe('PAUSED');
    expect(server.sent('POST').map(c => c.endPoint)).toEqual([
      'schedules/s1/pause'
    ]);
    await model.act('s1', 'resume');
    expect(model.schedule('s1')!.pause_status).toBe('UNPAUSED');
    expect(
      server.calls.filter(c => c.endPoint === 'schedules').length
    ).toBeGreaterThanOrEqual(3);
  });

  it('runs a schedule now and keeps the run it started', async () => {
    model.active = true;
    await until(() => model.schedules !== null);
    await model.act('s2', 'run-now');
    expect(model.startedRun).toMatchObject({ id: 7, schedule_id: 's2' });
  });

  it('repairs a run by its id and keeps a refusal', async () => {
    model.active = true;
    await until(() => model.schedules !== null);
    await model.repair('s1', 7);
    expect(server.sent('POST')[0]).toMatchObject({
      endPoint: 'schedule-runs/7/repair',
      body: { rerun_all_failed: true }
    });
    expect(model.actionError).toBeNull();
    await model.repair('s1', 8);
    expect(model.actionError).toBe('schedule run 8 is still running');
  });

  it('a deleted schedule leaves the list at once', async () => {
    model.active = true;
    await until(() => model.schedules !== null);
    await model.act('s2', 'delete');
    expect(server.sent('DELETE').map(c => c.endPoint)).toEqual([
      'schedules/s2'
    ]);
    expect(model.schedules!.map(s => s.id)).toEqual(['s1']);
  });

  it("keeps a refused action's message and changes nothing", async () => {
    model.active = true;
    await until(() => model.schedules !== null);
    server.refuse = new APIError(
      "You don't have CAN_MANAGE on schedule s1: its owner, ada, can grant it",
      'forbidden',
      403
    );
    await model.act('s1', 'pause');
    expect(model.actionError).toMatch(/don't have CAN_MANAGE/);
    expect(model.schedule('s1')!.pause_status).toBe('UNPAUSED');
    await model.act('s1', 'pause');
    expect(model.actionError).toBeNull();
  });

  it('a schedule made by the form shows before the next poll', async () => {
    model.active = true;
    await until(() => model.schedules !== null);
    model.added(schedule('s0', 'adhoc'));
    expect(model.schedules!.map(s => s.name)).toEqual([
      'adhoc',
      'nightly',
      'weekly'
    ]);
  });

  it('offers each action from the level it needs', () => {
    const viewer = schedule('v', 'v', 'CAN_VIEW');
    const runner = schedule('r', 'r', 'CAN_MANAGE_RUN');
    expect(allows(viewer, 'run-now')).toBe(false);
    expect(allows(runner, 'run-now')).toBe(true);
    expect(allows(runner, 'pause')).toBe(false);
    expect(allows(schedule('m', 'm'), 'delete')).toBe(true);
  });
});

describe('ScheduleForm', () => {
  let server: FakeServer;
  let form: ScheduleForm;
  beforeEach(() => {
    server = new FakeServer();
    form = new ScheduleForm({
      request: server.request,
      notebook: 'work/train.ipynb',
      timezone: 'Europe/Paris',
      debounce: 10
    });
  });
  afterEach(() => form.dispose());

  it("starts from the notebook's name and previews the default cron", async () => {
    expect(form.fields).toMatchObject({
      name: 'train',
      notebook: 'work/train.ipynb',
      nproc_per_node: 1
    });
    await until(() => form.preview !== null);
    expect(form.preview!.words).toBe('words of 0 2 * * * Europe/Paris');
    expect(server.calls[0].query).toEqual({
      cron: '0 2 * * *',
      timezone: 'Europe/Paris',
      count: 5
    });
  });

  it('previews once the user stops typing, not at every key', async () => {
    await until(() => form.preview !== null);
    for (const cron of ['*', '*/', '*/5', '*/5 * * * *']) {
      form.set('cron', cron);
    }
    expect(form.preview).toBeNull();
    await until(() => form.preview !== null);
    const asked = server.calls.filter(c => c.endPoint === 'schedules/preview');
    expect(asked.map(c => c.query.cron)).toEqual(['0 2 * * *', '*/5 * * * *']);
  });

  it("an answer to an older cron does not replace the newer one's", async () => {
    await until(() => form.preview !== null);
    server.holdPreviews = true;
    form.set('cron', '1 2 * * *');
    await until(() => server.held.length === 1);
    form.set('cron', '3 4 * * *');
    await until(() => server.held.length === 2);
    server.held[1]();
    await until(() => form.preview !== null);
    server.held[0]();
    await sleep(20);
    expect(form.preview!.words).toBe('words of 3 4 * * * Europe/Paris');
  });

  it("shows the server's word on a bad cron and does not save", async () => {
    form.set('cron', '61 * * * *');
    await until(() => form.previewError !== null);
    expect(form.problem).toMatch(/minute 61 is out of range/);
    expect(await form.save()).toBeNull();
    expect(server.sent('POST')).toEqual([]);
  });

  it('refuses ranks that are not a whole number from 1', () => {
    form.set('nproc_per_node', 0);
    expect(form.problem).toMatch(/Ranks must be/);
    form.set('nproc_per_node', 1.5);
    expect(form.problem).toMatch(/Ranks must be/);
    form.set('nproc_per_node', 2);
    expect(form.problem).toBeNull();
  });

  it('saves the fields as the route takes them', async () => {
    await until(() => form.preview !== null);
    form.set('name', ' nightly-train ');
    form.set('nproc_per_node', 2);
    const made = await form.save();
    expect(made!.name).toBe('nightly-train');
    expect(server.sent('POST')[0]).toMatchObject({
      endPoint: 'schedules',
      body: {
        notebook: 'work/train.ipynb',
        name: 'nightly-train',
        cron: '0 2 * * *',
        timezone: 'Europe/Paris',
        nproc_per_node: 2
      }
    });
    expect(server.sent('POST')[0].body).not.toHaveProperty('experiment');
  });

  it('keeps a refused save and clears it when a field changes', async () => {
    await until(() => form.preview !== null);
    server.refuse = new APIError(
      "a schedule named 'train' exists already",
      'conflict',
      409
    );
    expect(await form.save()).toBeNull();
    expect(form.saveError).toMatch(/exists already/);
    form.set('name', 'train-2');
    expect(form.saveError).toBeNull();
  });

  it('names a schedule after the notebook file', () => {
    expect(defaultName('a/b/Report.IPYNB')).toBe('Report');
  });

  it('is the notebook alone until a task is added, then a chain after it', () => {
    expect(form.tasks).toEqual([]);
    form.set('nproc_per_node', 2);
    form.addTask('command');
    expect(form.tasks).toEqual([
      {
        key: 'notebook',
        kind: 'notebook',
        target: 'work/train.ipynb',
        ranks: 2,
        dependsOn: [],
        runIf: 'ALL_SUCCESS'
      },
      {
        key: 'task_2',
        kind: 'command',
        target: '',
        ranks: 1,
        dependsOn: ['notebook'],
        runIf: 'ALL_SUCCESS'
      }
    ]);
    expect(form.problem).toBe('Task "task_2": give a command.');
  });

  it('saves a prep command before the notebook as the task graph', async () => {
    await until(() => form.preview !== null);
    form.addTask('command');
    form.setTask(1, { key: 'prep', target: ' python prep.py ' });
    form.setWaitsFor(1, 'notebook', false);
    form.setWaitsFor(0, 'prep', true);
    form.setTask(0, { runIf: 'NONE_FAILED' });
    form.addTask('notebook');
    form.setTask(2, { key: 'report', target: 'reports/summary.ipynb' });
    expect(form.problem).toBeNull();
    expect(await form.save()).not.toBeNull();
    const body = server.sent('POST')[0].body as Record<string, unknown>;
    expect(body).not.toHaveProperty('nproc_per_node');
    expect(body.tasks).toEqual([
      {
        task_key: 'notebook',
        notebook: 'work/train.ipynb',
        parameters: { nproc_per_node: 1 },
        depends_on: [{ task_key: 'prep' }],
        run_if: 'NONE_FAILED'
      },
      {
        task_key: 'prep',
        workload: { command: 'python prep.py', compute: { nproc_per_node: 1 } }
      },
      {
        task_key: 'report',
        notebook: 'reports/summary.ipynb',
        parameters: { nproc_per_node: 1 },
        depends_on: [{ task_key: 'prep' }],
        run_if: 'ALL_SUCCESS'
      }
    ]);
  });

  it('a renamed task is still waited for; a removed one no longer', () => {
    form.addTask('notebook');
    form.addTask('command');
    form.setTask(1, { key: 'train' });
    expect(form.tasks[2].dependsOn).toEqual(['train']);
    form.removeTask(1);
    expect(form.tasks.map(t => [t.key, t.dependsOn])).toEqual([
      ['notebook', []],
      ['task_3', []]
    ]);
    form.removeTask(1);
    form.removeTask(0); // the last task stays: a schedule runs something
    expect(form.tasks.map(t => t.key)).toEqual(['notebook']);
  });

  it('refuses a loop, a key used twice, a bad key, a path that is no notebook and bad ranks', () => {
    form.addTask('notebook');
    form.setTask(1, { target: 'b.ipynb' });
    form.setWaitsFor(0, 'task_2', true);
    expect(form.problem).toBe(
      'The tasks wait for each other: notebook → task_2 → notebook.'
    );
    form.setWaitsFor(0, 'task_2', false);
    expect(form.problem).toBeNull();
    form.setTask(1, { key: 'notebook' });
    expect(form.problem).toBe('Two tasks are called "notebook".');
    form.setTask(1, { key: 'has space' });
    expect(form.problem).toMatch(/^Task "has space": a key is letters/);
    form.setTask(1, { key: 'b', target: 'b.py' });
    expect(form.problem).toBe('Task "b": a notebook\'s path ends in .ipynb.');
    form.setTask(1, { target: 'b.ipynb', ranks: 0 });
    expect(form.problem).toMatch(/^Task "b": Ranks must be/);
  });
});

describe('schedules formatting', () => {
  it("shows a fire time on the schedule's clock with its offset", () => {
    expect(formatFireTime('2026-12-02T02:30:00+01:00')).toBe(
      '2026-12-02 02:30:00 +01:00'
    );
    expect(formatFireTime('2026-12-02T02:30:00Z')).toBe(
      '2026-12-02 02:30:00 UTC'
    );
    expect(formatFireTime('soon')).toBe('soon');
  });

  it('says how far a time is', () => {
    const now = Date.parse('2026-12-01T10:00:00Z');
    expect(relativeTime('2026-12-01T10:00:05Z', now)).toBe('in 5 s');
    expect(relativeTime('2026-12-01T10:30:00Z', now)).toBe('in 30 min');
    expect(relativeTime('2026-12-01T07:00:00Z', now)).toBe('3 h ago');
    expect(relativeTime('2026-12-05T10:00:00Z', now)).toBe('in 4 d');
  });

  it('says what a sweep task searches', () => {
    const search = { trials: 20, parallel: 4, storage: null };
    expect(sweepLine({ ...search, objective: { minimize: 'loss' } })).toBe(
      'minimize loss, 20 trials, 4 at once'
    );
    expect(
      sweepLine({ ...search, trials: 1, objective: { maximize: 'acc' } })
    ).toBe('maximize acc, 1 trial, 4 at once');
  });

  it('puts each task one stage after the last task it depends on', () => {
    const stages = taskStages([
      task('report', ['train', 'eval']),
      task('prep'),
      task('train', ['prep']),
      task('eval', ['prep', 'gone'])
    ]);
    expect(stages.map(s => s.map(t => t.task_key))).toEqual([
      ['prep'],
      ['train', 'eval'],
      ['report']
    ]);
  });

  it('a cycle cannot loop', () => {
    const stages = taskStages([task('a', ['b']), task('b', ['a'])]);
    expect(
      stages
        .flat()
        .map(t => t.task_key)
        .sort()
    ).toEqual(['a', 'b']);
  });
});
