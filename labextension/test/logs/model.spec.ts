import { APIError, Query } from '../../src/common/api';
import { JobLogsModel, TAIL } from '../../src/logs/model';
import { emptyTextOf, infoOf } from '../../src/logs/status';
import type { IJob, ILogLine, ILogsResponse } from '../../src/logs/types';

const JOB = 'job-0001';

function job(attempts = 1, status = 'RUNNING'): IJob {
  return {
    id: JOB,
    status,
    owner: 'alice',
    created: 0,
    started: 1,
    ended: null,
    message: null,
    kind: 'torchrun',
    nproc_per_node: 2,
    nnodes: 1,
    max_retries: 1,
    experiment_id: null,
    run_name: 'train',
    logs_expired: false,
    attempts: Array.from({ length: attempts }, (_, i) => ({
      attempt: i + 1,
      status,
      run_id: null,
      started: 1,
      ended: null,
      exit_codes: null,
      failed_rank: null,
      message: null,
      run_url: null
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

  request = async <T>(
    endPoint: string,
    init: RequestInit = {},
    query: Query = {}
  ): Promise<T> => {
    this.calls.push({ endPoint, method: init.method ?? 'GET', query });
    if (endPoint === `jobs/${JOB}`) {
      return this.job as T;
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
});
