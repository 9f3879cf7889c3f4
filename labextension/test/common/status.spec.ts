import { PollingModel } from '../../src/common/model';
import { pausedText, StatusKind, statusOf } from '../../src/common/status';
import { until } from '../helpers';

/** A model whose requests fail while `fail` is set. */
class Model extends PollingModel {
  fail = false;
  protected async fetch(): Promise<void> {
    if (this.fail) {
      throw new Error('the server is gone');
    }
  }
}

const own = () => ({ text: 'Updated 19:00:20', title: 'every 10 s' });

describe('the status line of every polling panel', () => {
  let model: Model;
  beforeEach(() => {
    model = new Model({
      name: 'test',
      frequency: { interval: 60_000, backoff: false },
      idleTimeout: 0
    });
  });
  afterEach(() => model.dispose());

  it("says the view's own text while all is well", async () => {
    await model.refresh();
    expect(statusOf(model, own)).toEqual({
      kind: StatusKind.Ready,
      text: 'Updated 19:00:20',
      title: 'every 10 s'
    });
  });

  it('says Paused, with the time of the last update, once idle', async () => {
    model.active = true;
    await until(() => model.paused === 'idle' && model.updatedAt !== null);
    const status = statusOf(model, own);
    expect(status.kind).toBe(StatusKind.Paused);
    expect(status.text).toBe('Paused');
    expect(status.title).toMatch(/^Last update \d\d:\d\d:\d\d$/);
    expect(pausedText(model)).toBe(
      'Paused after 0 seconds without activity. ' +
        'Reopen the panel or click Resume to continue.'
    );
  });

  it('puts an error before a pause: the data is stale for a reason to fix', async () => {
    model.active = true;
    await until(() => model.paused === 'idle');
    model.fail = true;
    await expect(model.refresh()).rejects.toThrow();
    await until(() => model.paused === 'idle');
    expect(statusOf(model, own)).toEqual({
      kind: StatusKind.Error,
      text: 'Update failed: the server is gone',
      title: 'Update failed: the server is gone'
    });
  });

  it("leads with the view's notice, but never before an error", async () => {
    await model.refresh();
    expect(statusOf(model, own, 'Job ended').text).toBe(
      'Job ended · Updated 19:00:20'
    );
    model.fail = true;
    await expect(model.refresh()).rejects.toThrow();
    expect(statusOf(model, own, 'Job ended').text).toBe(
      'Update failed: the server is gone'
    );
  });

  it('says nothing of a pause while not paused', () => {
    expect(pausedText(model)).toBe('');
  });
});
