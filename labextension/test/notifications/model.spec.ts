import { APIError } from '../../src/common/api';
import type { Query } from '../../src/common/api';
import {
  autoClose,
  IAirNotification,
  INotificationsAnswer,
  NotificationsModel,
  runLink,
  toastMessage,
  toastType
} from '../../src/notifications/model';
import { until } from '../helpers';

function notification(
  id: number,
  extra: Partial<IAirNotification> = {}
): IAirNotification {
  return {
    id,
    created: 1764800000 + id,
    event: 'failure',
    level: 'error',
    title: `air job 20261204-10000${id}-a1b2c3 failed: rank 1 exited with code 1`,
    facts: [['Job', `20261204-10000${id}-a1b2c3`]],
    lines: ['Traceback (most recent call last):', 'ValueError: bad batch'],
    links: [
      {
        label: 'MLflow run',
        url: 'http://127.0.0.1:8888/jupyter-air/mlflow/abc/#/experiments/1/runs/r1'
      }
    ],
    command: `air logs 20261204-10000${id}-a1b2c3`,
    job_id: `20261204-10000${id}-a1b2c3`,
    schedule_id: null,
    ...extra
  };
}

interface ICall {
  endPoint: string;
  query: Query;
  signal: AbortSignal | null | undefined;
  answer: (doc: INotificationsAnswer) => void;
  fail: (error: unknown) => void;
}

/** The route, answered by the test: each call waits until the test answers it. */
class FakeServer {
  calls: ICall[] = [];

  request = <T>(
    endPoint: string,
    init: RequestInit = {},
    query: Query = {}
  ): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      init.signal?.addEventListener('abort', () =>
        reject(new DOMException('aborted', 'AbortError'))
      );
      this.calls.push({
        endPoint,
        query,
        signal: init.signal,
        answer: doc => resolve(doc as T),
        fail: reject
      });
    });

  /** The newest call, once it is made (the `n`th, counting from 1). */
  async call(n: number): Promise<ICall> {
    await until(() => this.calls.length >= n);
    return this.calls[n - 1];
  }
}

/** A model with a server that answers at once and retries soon. */
function setUp(options: Partial<NotificationsModel.IOptions> = {}): {
  server: FakeServer;
  model: NotificationsModel;
  seen: number[];
} {
  const server = new FakeServer();
  const model = new NotificationsModel({
    request: server.request,
    retry: { first: 10, max: 40 },
    minInterval: 0,
    ...options
  });
  const seen: number[] = [];
  model.received.connect((_, n) => seen.push(n.id));
  model.start();
  return { server, model, seen };
}

const flush = (): Promise<void> => new Promise(r => setTimeout(r, 0));

describe('NotificationsModel', () => {
  afterEach(() => {
    jest.useRealTimers();
  });

  it('starts from the newest id, showing nothing older', async () => {
    const { server, model, seen } = setUp();
    const first = await server.call(1);
    expect(first.endPoint).toBe('notifications');
    expect(first.query).toEqual({});
    // A first answer's notifications are old ones: never shown.
    first.answer({ notifications: [notification(6)], last: 7 });
    const second = await server.call(2);
    expect(second.query).toEqual({ after: 7, wait: 25 });
    expect(seen).toEqual([]);
    expect(model.last).toBe(7);
    model.dispose();
  });

  it('long-polls from the last id seen, signalling each notification once', async () => {
    const { server, model, seen } = setUp({ wait: 3 });
    (await server.call(1)).answer({ notifications: [], last: 7 });
    (await server.call(2)).answer({
      notifications: [notification(8), notification(9)],
      last: 9
    });
    const third = await server.call(3);
    expect(third.query).toEqual({ after: 9, wait: 3 });
    expect(seen).toEqual([8, 9]);
    // One seen already (another tab's answer, a retried call) is not shown again.
    third.answer({
      notifications: [notification(9), notification(10)],
      last: 10
    });
    (await server.call(4)).answer({ notifications: [], last: 10 });
    expect((await server.call(5)).query).toEqual({ after: 10, wait: 3 });
    expect(seen).toEqual([8, 9, 10]);
    model.dispose();
  });

  it('passes the notification itself to its listeners', async () => {
    const { server, model } = setUp();
    const received: IAirNotification[] = [];
    model.received.connect((_, n) => received.push(n));
    (await server.call(1)).answer({ notifications: [], last: 0 });
    (await server.call(2)).answer({
      notifications: [notification(1)],
      last: 1
    });
    await server.call(3);
    expect(received).toEqual([notification(1)]);
    model.dispose();
  });

  it('backs off after errors, doubling up to its limit, and resets on success', async () => {
    jest.useFakeTimers();
    const { server, model } = setUp({ retry: { first: 5000, max: 60000 } });
    const failAndMeasure = async (n: number): Promise<number> => {
      (await server.call(n)).fail(
        new APIError('busy', 'service_unavailable', 503)
      );
      let waited = 0;
      while (server.calls.length === n) {
        await jest.advanceTimersByTimeAsync(1000);
        waited += 1000;
      }
      return waited;
    };
    const pauses = [];
    for (let n = 1; n <= 6; n++) {
      pauses.push(await failAndMeasure(n));
    }
    expect(pauses).toEqual([5000, 10000, 20000, 40000, 60000, 60000]);
    expect(model.error).toBeInstanceOf(APIError);
    expect(model.last).toBeNull(); // still to learn where to start
    (await server.call(7)).answer({ notifications: [], last: 3 });
    await jest.advanceTimersByTimeAsync(0);
    expect(server.calls).toHaveLength(8);
    expect(server.calls[7].query).toEqual({ after: 3, wait: 25 });
    expect(model.error).toBeNull();
    expect(await failAndMeasure(8)).toBe(5000); // the backoff starts over
    model.dispose();
  });

  it('does not ask again at once when a poll comes back at once', async () => {
    jest.useFakeTimers();
    const { server, model } = setUp({ minInterval: 2000 });
    (await server.call(1)).answer({ notifications: [], last: 0 });
    await jest.advanceTimersByTimeAsync(1999);
    expect(server.calls).toHaveLength(1);
    await jest.advanceTimersByTimeAsync(1);
    expect(server.calls).toHaveLength(2);
    model.dispose();
  });

  it('aborts the poll under way and stops when disposed', async () => {
    const { server, model, seen } = setUp();
    (await server.call(1)).answer({ notifications: [], last: 0 });
    const waiting = await server.call(2);
    expect(waiting.signal?.aborted).toBe(false);
    model.dispose();
    expect(model.isDisposed).toBe(true);
    expect(waiting.signal?.aborted).toBe(true);
    waiting.answer({ notifications: [notification(1)], last: 1 });
    await flush();
    await flush();
    expect(server.calls).toHaveLength(2);
    expect(seen).toEqual([]);
  });

  it('stops during a backoff when disposed', async () => {
    jest.useFakeTimers();
    const { server, model } = setUp({ retry: { first: 5000, max: 60000 } });
    (await server.call(1)).fail(new Error('network down'));
    await jest.advanceTimersByTimeAsync(1000);
    model.dispose();
    await jest.advanceTimersByTimeAsync(120000);
    expect(server.calls).toHaveLength(1);
  });

  it('starts one loop however often it is started', async () => {
    const { server, model } = setUp();
    model.start();
    model.start();
    await server.call(1);
    await flush();
    expect(server.calls).toHaveLength(1);
    model.dispose();
  });
});

describe('the toast', () => {
  it("shows the title and the failing rank's last line", () => {
    const n = notification(1, {
      lines: ['Traceback (most recent call last):', 'ValueError: bad batch', '']
    });
    expect(toastMessage(n)).toBe(`${n.title}\nValueError: bad batch`);
    expect(toastMessage(notification(2, { lines: [] }))).toBe(
      notification(2).title
    );
  });

  it('keeps within the 140 characters JupyterLab shows', () => {
    const n = notification(1, { lines: ['x'.repeat(500)] });
    const text = toastMessage(n);
    expect(text.length).toBe(140);
    expect(text.endsWith('…')).toBe(true);
    const long = notification(2, { title: 't'.repeat(135) });
    expect(toastMessage(long)).toBe(long.title);
  });

  it('keeps errors and warnings until dismissed', () => {
    expect(autoClose('error')).toBe(false);
    expect(autoClose('warning')).toBe(false);
    expect(autoClose('success')).toBe(10000);
    expect(autoClose('info')).toBe(10000);
  });

  it('maps levels to the notification types, unknown ones to info', () => {
    expect(toastType('error')).toBe('error');
    expect(toastType('warning')).toBe('warning');
    expect(toastType('success')).toBe('success');
    expect(toastType('info')).toBe('info');
    expect(toastType('debug')).toBe('info');
  });

  it("opens only an http(s) MLflow run link, or one of this server's pages", () => {
    expect(runLink(notification(1))).toBe(
      'http://127.0.0.1:8888/jupyter-air/mlflow/abc/#/experiments/1/runs/r1'
    );
    const here = '/user/ada/jupyter-air/mlflow/abc/#/experiments/1/runs/r1';
    expect(
      runLink(notification(5, { links: [{ label: 'MLflow run', url: here }] }))
    ).toBe(here);
    expect(
      runLink(
        notification(6, {
          links: [{ label: 'MLflow run', url: '//evil.example.com/x' }]
        })
      )
    ).toBeNull();
    expect(runLink(notification(2, { links: [] }))).toBeNull();
    expect(
      runLink(
        notification(3, {
          links: [{ label: 'MLflow run', url: 'javascript:alert(1)' }]
        })
      )
    ).toBeNull();
    expect(
      runLink(
        notification(4, {
          links: [{ label: 'Logs', url: 'http://127.0.0.1:8888/lab?air-job=x' }]
        })
      )
    ).toBeNull();
  });
});
