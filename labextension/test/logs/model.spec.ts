import { APIError, Query } from '../../src/common/api';
import { JobLogsModel, TAIL } from '../../src/logs/model';
import { emptyTextOf, infoOf } from '../../src/logs/status';
import type {
  IJob,
  ILogLine,
  ILogsResponse,
  ISessionCell,
  IStacksResponse
} from '../../src/logs/types';

const JOB = 'job-0001';

function job(attempts = 1, status = 'RUNNING'): IJob {
  return {
    id: JOB,
    status,
    finishing: false,
    tracking: null,
    owner: 'alice',
    created: 0,
    started: 1,
    ended: null,
    message: null,
    kind: 'torchrun',
    nproc_per_node: 2,
    nnodes: 1,
    backend: 'local',
    max_retries: 1,
    checkpoint_dir: '/home/alice/ckpt',
    experiment_id: null,
    run_name: 'train',
    tracking_uri: null,
    logs_expired: false,
    parent_id: null,
    children: [],
    notifications: [],
    attempts: Array.from({ length: attempts }, (_, i) => ({
      attempt: i + 1,
      status,
      run_id: null,
      started: 1,
      ended: null,
      exit_codes: null,
      failed_rank: null,
      message: null,
      run_url: null,
      nodes: [],
      resumed_from: null,
      resumed_step: null,
      progress: null,
      hang: null
    }))
  };
}

const lines = (n: number, rank = 0): ILogLine[] =>
  Array.from({ length: n }, (_, i) => ({
    t: i,
    node: 0,
    rank,
    stream: 'out',
    level: 'info',
    text: `line ${i}`
  }));

function logs(
  attempt: number,
  n: number,
  extra: Partial<ILogsResponse> = {}
): ILogsResponse {
  return {
    job: JOB,
    attempt,
    attempts: 1,
    status: 'RUNNING',
    lines: lines(n),
    next: `cursor-${n}`,
    done: false,
    ...extra
  };
}

/** The jobs routes of a server, answered by the test. */
class FakeServer {
  calls: { endPoint: string; method: string; query: Query }[] = [];
  job: IJob = job();
  answers: (ILogsResponse | Error)[] = [];
  /** A session's ended cells, as `jobs/<id>/cells` lists them. */
  cells: ISessionCell[] = [];
  /** `jobs/<id>/stacks`' answers, by method. */
  stacks: Record<string, IStacksResponse | Error> = {};

  request = async <T>(
    endPoint: string,
    init: RequestInit = {},
    query: Query = {}
  ): Promise<T> => {
    this.calls.push({ endPoint, method: init.method ?? 'GET', query });
    if (endPoint === `jobs/${JOB}`) {
      return this.job as T;
    }
    if (endPoint === `jobs/${JOB}/cells`) {
      return { job: JOB, cells: this.cells } as T;
    }
    if (endPoint === `jobs/${JOB}/stacks`) {
      const answer = this.stacks[init.method ?? 'GET'];
      if (answer === undefined || answer instanceof Error) {
        throw answer ?? new Error(`unexpected ${init.method} stacks`);
      }
      return answer as T;
    }
    const answer = this.answers.shift();
    if (answer === undefined) {
      throw new Error(`unexpected ${endPoint}`);
    }
    if (answer instanceof Error) {
      throw answer;
    }
    return answer as T;
  };

  logCalls(): Query[] {
    return this.calls
      .filter(c => c.endPoint === `jobs/${JOB}/logs`)
      .map(c => c.query);
  }
}

const settle = () => new Promise(resolve => setTimeout(resolve, 0));

describe('JobLogsModel', () => {
  let server: FakeServer;
  let model: JobLogsModel;

  function make(options: Partial<JobLogsModel.IOptions> = {}): JobLogsModel {
    model = new JobLogsModel({
      jobId: JOB,
      request: server.request,
      ...options
    });
    return model;
  }

  beforeEach(() => {
    server = new FakeServer();
  });
  afterEach(() => model?.dispose());

  it('loads the tail of the latest attempt, then follows from the cursor', async () => {
    server.job = job(2);
    server.answers = [logs(2, 3), logs(2, 2, { next: 'c2' })];
    make();
    await settle();
    expect(server.logCalls()[0]).toMatchObject({ attempt: 2, tail: TAIL });
    expect(model.lines.size).toBe(3);
    expect(model.filters.attempt).toBe(2);

    await model.refresh();
    expect(server.logCalls()[1]).toMatchObject({
      attempt: 2,
      cursor: 'cursor-3',
      limit: 1000
    });
    expect(model.lines.size).toBe(5);
    expect(infoOf(model)).toMatchObject({
      count: '5 lines',
      message: 'Following new lines…',
      error: false
    });
  });

  it('reads the job again while its runs wait for their server, until nothing waits', async () => {
    jest.useFakeTimers();
    try {
      const waiting =
        'tracking: http://mlflow:5000 unreachable since 18:00:27 (connection refused); 12 points waiting';
      server.job = { ...job(1, 'SUCCEEDED'), ended: 2, tracking: waiting };
      server.answers = [logs(1, 1, { status: 'SUCCEEDED', done: true })];
      make();
      await jest.advanceTimersByTimeAsync(0);
      expect(model.job?.tracking).toBe(waiting);
      const reads = () =>
        server.calls.filter(c => c.endPoint === `jobs/${JOB}`).length;
      const before = reads();

      server.job = { ...server.job, tracking: null };
      await jest.advanceTimersByTimeAsync(10_000);
      expect(reads()).toBe(before + 1);
      expect(model.job?.tracking).toBeNull();

      await jest.advanceTimersByTimeAsync(60_000);
      expect(reads()).toBe(before + 1); // nothing waits: no more reads
    } finally {
      jest.useRealTimers();
    }
  });

  it("reads a running job again every 10 s while following: its attempt's progress moves", async () => {
    jest.useFakeTimers();
    try {
      server.answers = [logs(1, 1)];
      make();
      await jest.advanceTimersByTimeAsync(0);
      expect(model.job?.attempts[0].progress).toBeNull();
      const reads = () =>
        server.calls.filter(c => c.endPoint === `jobs/${JOB}`).length;
      const before = reads();
      const progress = {
        step: 40,
        total: 100,
        fraction: 0.4,
        step_time_s: 0.5,
        samples_per_s: null,
        tokens_per_s: null,
        eta_s: 30,
        updated: 5,
        line: 'step 40 / 100 (40 %), ETA 00:01 (1 min)',
        mfu: { value: null, why: 'no GPU' }
      };
      server.job = job();
      server.job.attempts[0].progress = progress;

      server.answers.push(logs(1, 0));
      await model.refresh(); // a follow tick before 10 s: the job is not read
      expect(reads()).toBe(before);

      await jest.advanceTimersByTimeAsync(10_000);
      server.answers.push(logs(1, 0));
      await model.refresh();
      await jest.advanceTimersByTimeAsync(0);
      expect(reads()).toBe(before + 1);
      expect(model.job?.attempts[0].progress).toEqual(progress);
    } finally {
      jest.useRealTimers();
    }
  });

  it('counts the lines that arrive while not following', async () => {
    server.answers = [logs(1, 1), logs(1, 4)];
    make();
    await settle();
    model.setFollowing(false);
    await model.refresh();
    expect(infoOf(model).message).toBe('Paused: 4 new lines below.');
    model.setFollowing(true);
    expect(infoOf(model).message).toBe('Following new lines…');
  });

  it('says an ended attempt printed everything', async () => {
    server.answers = [logs(1, 0, { done: true, status: 'SUCCEEDED' })];
    make();
    await settle();
    await settle();
    expect(model.done).toBe(true);
    expect(emptyTextOf(model)).toBe('This attempt printed nothing.');
    expect(infoOf(model).message).toBe('All lines loaded: the job has ended.');
  });

  it('asks again from the end with new filters, and says when none match', async () => {
    server.answers = [logs(1, 2), logs(1, 0)];
    make();
    await settle();
    const cleared: boolean[] = [];
    model.linesChanged.connect((_, change) => cleared.push(change.cleared));
    model.setFilters({ level: 'error', search: 'nan' });
    await settle();
    await settle();
    expect(cleared[0]).toBe(true);
    expect(server.logCalls()[1]).toMatchObject({
      level: 'error',
      search: 'nan',
      tail: TAIL
    });
    expect(emptyTextOf(model)).toBe('No line matches the filters.');
  });

  it('forgets every line and says who can grant access on a 403', async () => {
    server.answers = [
      logs(1, 3),
      new APIError('forbidden', 'forbidden', 403, {
        job: JOB,
        needed: 'CAN_VIEW',
        owner: 'alice'
      })
    ];
    make();
    await settle();
    expect(model.lines.size).toBe(3);
    await expect(model.refresh()).rejects.toBeInstanceOf(APIError);
    expect(model.denied).toEqual({
      job: JOB,
      needed: 'CAN_VIEW',
      owner: 'alice'
    });
    expect(model.lines.size).toBe(0);
    expect(model.job).toBeNull();
    expect(infoOf(model)).toMatchObject({ message: 'No access.', error: true });
    expect(emptyTextOf(model)).toBe('');
  });

  it('reports a failed load in place of the lines', async () => {
    server.answers = [new APIError('no such job', 'not_found', 404)];
    make();
    await settle();
    await settle();
    expect(model.failed).toBe(true);
    expect(emptyTextOf(model)).toBe('Could not load the logs: no such job');
  });

  it('keeps an attempt chosen by the user', async () => {
    server.job = job(2);
    server.answers = [logs(2, 1), logs(1, 1)];
    make();
    await settle();
    model.setAttempt(1);
    await settle();
    await settle();
    expect(server.logCalls()[1]).toMatchObject({ attempt: 1, tail: TAIL });
    expect(model.filename).toBe(`${JOB}-attempt-1.log`);
  });

  it('offers the nodes and ranks of the job and those seen', async () => {
    server.answers = [{ ...logs(1, 0), lines: lines(1, 5) }];
    make();
    await settle();
    await settle();
    expect(model.origins).toEqual({ nodes: [0], ranks: [0, 1, 5] });
  });

  describe('stacks', () => {
    const set = (reason: string): IStacksResponse => ({
      job: JOB,
      sets: [
        {
          attempt: 1,
          name: '20261204-183102',
          reason,
          time: 1,
          ranks: [
            {
              rank: 0,
              node: 0,
              pid: 42,
              text: 'all_reduce (c10d.py:1)',
              error: null
            }
          ],
          hang: null
        }
      ]
    });
    const stackCalls = () =>
      server.calls
        .filter(c => c.endPoint === `jobs/${JOB}/stacks`)
        .map(c => c.method);

    it('of a running job are taken now, and closed on demand', async () => {
      server.answers = [logs(1, 1)];
      server.stacks = { POST: set('asked for') };
      make();
      await settle();
      await model.showStacks();
      expect(stackCalls()).toEqual(['POST']);
      expect(model.stacks?.[0].reason).toBe('asked for');
      expect(model.stacksPending).toBe(false);
      model.hideStacks();
      expect(model.stacks).toBeNull();
    });

    it('of an ended job are the sets saved before', async () => {
      server.job = job(1, 'CANCELLED');
      server.answers = [logs(1, 1, { done: true, status: 'CANCELLED' })];
      server.stacks = { GET: set('cancelled after rank 1 went silent') };
      make();
      await settle();
      await model.showStacks();
      expect(stackCalls()).toEqual(['GET']);
      expect(model.stacks?.[0].ranks[0].text).toContain('all_reduce');
    });

    it('are the saved ones when the job ended meanwhile (409)', async () => {
      server.answers = [logs(1, 1)];
      server.stacks = {
        POST: new APIError('job runs no rank now', 'conflict', 409),
        GET: set('a likely hang')
      };
      make();
      await settle();
      await model.showStacks();
      expect(stackCalls()).toEqual(['POST', 'GET']);
      expect(model.stacks?.[0].reason).toBe('a likely hang');
    });

    it('are the saved ones for a viewer, who may not take them', async () => {
      server.answers = [logs(1, 1)];
      server.stacks = {
        POST: new APIError('CAN_MANAGE_RUN needed', 'forbidden', 403),
        GET: set('a likely hang')
      };
      make();
      await settle();
      await model.showStacks();
      expect(stackCalls()).toEqual(['POST', 'GET']);
      expect(model.stacks?.[0].reason).toBe('a likely hang');
      expect(infoOf(model).message).toBe(
        'Taking stacks needs CAN_MANAGE_RUN: these were taken before.'
      );
    });

    it('say why they could not be read, and when none were', async () => {
      server.answers = [logs(1, 1)];
      server.stacks = {
        POST: new APIError('the job store is busy', 'unavailable', 503)
      };
      make();
      await settle();
      await model.showStacks();
      expect(model.stacks).toBeNull();
      expect(infoOf(model).message).toBe('Stacks: the job store is busy');
      model.dispose();
      server.job = job(1, 'SUCCEEDED');
      server.answers = [logs(1, 1, { done: true, status: 'SUCCEEDED' })];
      server.stacks = { GET: { job: JOB, sets: [] } };
      make();
      await settle();
      await model.showStacks();
      expect(infoOf(model).message).toBe('No stacks were taken of this job.');
    });
  });

  describe('of a warm session', () => {
    const cell = (n: number, started: number, ended: number): ISessionCell => ({
      cell: n,
      run_id: `run${n}`,
      cell_id: n === 1 ? 'abc' : null,
      started,
      ended,
      status: 'SUCCEEDED'
    });
    /** A session's lines at times `ts`, each with the cell the server gave it. */
    const sessionLines = (...at: [number, number | null][]): ILogLine[] =>
      at.map(([t, c]) => ({
        t,
        node: 0,
        rank: 0,
        stream: 'out',
        level: 'info',
        text: `at ${t}`,
        cell: c,
        cell_id: null
      }));

    beforeEach(() => {
      server.job = { ...job(), kind: 'session' };
      server.cells = [cell(1, 10, 11), cell(2, 20, 21)];
    });

    it("offers its ended cells and shows one cell with the route's cell=N", async () => {
      server.answers = [
        logs(1, 0, { lines: sessionLines([10.5, 1], [20.5, 2]) }),
        logs(1, 0, { lines: sessionLines([20.5, 2]) })
      ];
      make();
      await settle();
      await settle();
      expect(model.session).toBe(true);
      expect(model.cells.map(c => c.cell)).toEqual([1, 2]);
      expect(model.lines.lines.map(l => l.cell)).toEqual([1, 2]);

      model.setFilters({ cell: 2 });
      await settle();
      await settle();
      expect(server.logCalls()[1]).toMatchObject({ cell: 2, tail: TAIL });
      expect(model.lines.size).toBe(1);
      expect(model.filename).toBe(`${JOB}-attempt-1-cell-2.log`);
      // An ended cell's lines all came at once: nothing more to follow.
      expect(model.done).toBe(true);
      expect(infoOf(model).message).toBe(
        'All lines of cell 2 loaded: it has ended.'
      );
    });

    it('opens on the cell it was given', async () => {
      server.answers = [logs(1, 1)];
      make({ cell: 1 });
      await settle();
      await settle();
      expect(model.filters.cell).toBe(1);
      expect(server.logCalls()[0]).toMatchObject({ cell: 1 });
    });

    it('follows the next cell while it runs, then asks for its own lines', async () => {
      server.cells = [cell(1, 10, 11)];
      server.answers = [logs(1, 1)];
      make({ cell: 2 });
      await settle();
      await settle();
      expect(model.cellWait).toBe('next');
      // cell=2 would be a 404 until it ends: the lines since cell 1 ended meanwhile
      expect(server.logCalls()[0]).toMatchObject({ cell: null, since: 11 });
      expect(model.done).toBe(false);
      expect(infoOf(model).message).toBe(
        'Cell 2 has not ended: following the lines since the cell before it.'
      );

      server.cells = [cell(1, 10, 11), cell(2, 20, 21)];
      server.answers = [logs(1, 2)];
      await model.refresh();
      await settle();
      await settle();
      expect(model.cellWait).toBeNull();
      expect(server.logCalls()[1]).toMatchObject({ cell: 2, tail: TAIL });
      expect(model.lines.size).toBe(2);
      expect(model.done).toBe(true);
    });

    it('waits without asking for the lines of a cell after the next one', async () => {
      server.cells = [cell(1, 10, 11)];
      make({ cell: 3 });
      await settle();
      await settle();
      expect(model.cellWait).toBe('later');
      expect(server.logCalls()).toEqual([]);
      expect(emptyTextOf(model)).toBe('Cell 3 has not started yet.');

      server.cells = [cell(1, 10, 11), cell(2, 12, 13), cell(3, 14, 15)];
      server.answers = [logs(1, 1)];
      await model.refresh();
      await settle();
      await settle();
      expect(model.cellWait).toBeNull();
      expect(server.logCalls()).toEqual([
        expect.objectContaining({ cell: 3, tail: TAIL })
      ]);
    });

    it('gives lines printed in a running cell their cell once it ends', async () => {
      server.cells = [cell(1, 10, 11)];
      server.answers = [
        logs(1, 0, { lines: sessionLines([10.5, 1], [20.5, null]) })
      ];
      make();
      await settle();
      await settle();
      const relabelled: boolean[] = [];
      model.linesChanged.connect((_, change) =>
        relabelled.push(change.relabelled ?? false)
      );
      expect(model.lines.lines.map(l => l.cell)).toEqual([1, null]);

      server.cells = [cell(1, 10, 11), cell(2, 20, 21)];
      server.answers = [logs(1, 0)];
      jest.spyOn(Date, 'now').mockReturnValue(Date.now() + 60_000);
      try {
        await model.refresh(); // a follow tick, past the cells' re-read interval
      } finally {
        jest.restoreAllMocks();
      }
      expect(model.lines.lines.map(l => l.cell)).toEqual([1, 2]);
      expect(relabelled).toEqual([true]);
      expect(model.cells.map(c => c.cell)).toEqual([1, 2]);
    });

    it('asks nothing of cells for a job that is not a session', async () => {
      server.job = job();
      server.answers = [logs(1, 1)];
      make();
      await settle();
      await settle();
      expect(model.session).toBe(false);
      expect(server.calls.map(c => c.endPoint)).not.toContain(
        `jobs/${JOB}/cells`
      );
    });
  });
});
