import { APIError } from '../../src/common/api';
import { FetchKind, PollingModel } from '../../src/common/model';
import { sleep, until } from '../helpers';

/** A model whose requests answer with what the test queues. */
class Model extends PollingModel {
  calls: FetchKind[] = [];
  running = 0;
  overlapped = false;
  fail: unknown = null;
  delay = 0;

  protected async fetch(kind: FetchKind): Promise<void> {
    this.calls.push(kind);
    this.overlapped ||= this.running > 0;
    this.running++;
    await sleep(this.delay);
    this.running--;
    if (this.fail) {
      throw this.fail;
    }
  }
}

function make(options: Partial<PollingModel.IOptions> = {}): Model {
  return new Model({
    name: 'test',
    frequency: { interval: 30, backoff: false },
    ...options
  });
}

describe('PollingModel', () => {
  let model: Model;
  afterEach(() => model.dispose());

  it('stands by until a view is shown, then asks at once and on every tick', async () => {
    model = make();
    await sleep(100);
    expect(model.calls).toEqual([]);
    model.active = true;
    await until(() => model.calls.length >= 3);
    model.active = false;
    await sleep(40);
    const count = model.calls.length;
    await sleep(100);
    expect(model.calls.length).toBe(count);
  });

  it('tells its views about requests and their errors', async () => {
    model = make({ frequency: { interval: 60_000, backoff: false } });
    const seen: Array<[boolean, string | null]> = [];
    model.stateChanged.connect(() => seen.push([model.busy, model.error]));
    model.fail = new Error('boom');
    await expect(model.refresh()).rejects.toThrow('boom');
    expect(model.error).toBe('boom');
    expect(seen).toEqual([
      [true, null],
      [false, 'boom']
    ]);
    model.fail = null;
    await model.refresh();
    expect(model.error).toBeNull();
  });

  it('says a 404 of its own API means the server extension is off', async () => {
    model = make({ frequency: { interval: 60_000, backoff: false } });
    model.fail = new APIError('Not Found', 'http_error', 404);
    await expect(model.refresh()).rejects.toBeInstanceOf(APIError);
    expect(model.error).toBe(
      'the jupyter_air server extension is not enabled (404)'
    );
    model.fail = new APIError('no such node', 'not_found', 404);
    await expect(model.refresh()).rejects.toBeInstanceOf(APIError);
    expect(model.error).toBe('no such node');
  });

  it('runs one request at a time, polls and refreshes alike', async () => {
    model = make({ frequency: { interval: 5, backoff: false } });
    model.delay = 20;
    model.active = true;
    await Promise.all([model.refresh(), model.refresh(), model.refresh()]);
    await until(() => model.calls.includes('poll'));
    expect(model.calls.filter(kind => kind === 'refresh').length).toBe(3);
    expect(model.overlapped).toBe(false);
  });

  it('pauses after the idle timeout, and a refresh or resume goes on', async () => {
    model = make({ idleTimeout: 0 });
    model.active = true;
    await until(() => model.paused === 'idle');
    const count = model.calls.length;
    await sleep(100);
    expect(model.calls.length).toBe(count);

    await model.refresh();
    expect(model.paused).toBeNull();
    expect(model.calls[model.calls.length - 1]).toBe('refresh');
  });

  it('pauses while the browser tab is hidden and resumes when shown', async () => {
    model = make({ idleTimeout: 600 });
    model.active = true;
    let hidden = true;
    Object.defineProperty(document, 'hidden', {
      configurable: true,
      get: () => hidden
    });
    try {
      document.dispatchEvent(new Event('visibilitychange'));
      expect(model.paused).toBe('hidden');
      hidden = false;
      document.dispatchEvent(new Event('visibilitychange'));
      expect(model.paused).toBeNull();
    } finally {
      delete (document as any).hidden;
    }
  });

  it('resumes a pause when a view is shown again', async () => {
    model = make({ idleTimeout: 0 });
    model.active = true;
    await until(() => model.paused === 'idle');
    model.active = false;
    expect(model.paused).toBe('idle');
    model.active = true;
    expect(model.paused).toBeNull();
  });
});
