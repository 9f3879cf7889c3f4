import type { Query } from '../../src/common/api';
import { GpuHistory } from '../../src/gpu/history';
import { GpuResourcesModel, nodeKey } from '../../src/gpu/model';
import type { IJobNode } from '../../src/gpu/types';
import { answer } from './answers';

interface ICall {
  endPoint: string;
  method: string;
  query: Query;
}

/** A server that answers each endpoint with what the test gives it. */
class FakeServer {
  calls: ICall[] = [];
  routes: Record<string, (query: Query) => unknown> = {};

  request = async <T>(
    endPoint: string,
    init: RequestInit = {},
    query: Query = {}
  ): Promise<T> => {
    this.calls.push({ endPoint, method: init.method ?? 'GET', query });
    const route = this.routes[endPoint];
    if (!route) {
      throw new Error(`no route ${endPoint}`);
    }
    return route(query) as T;
  };
}

const NODE: IJobNode = { job: 'job-abc', attempt: 1, node: 1, hostname: 'w1' };

describe('GpuResourcesModel', () => {
  let server: FakeServer;
  let model: GpuResourcesModel;

  beforeEach(() => {
    server = new FakeServer();
    model = new GpuResourcesModel({
      request: server.request,
      settings: { pollInterval: 3600 }
    });
  });
  afterEach(() => model.dispose());

  it('asks only for the samples it misses', async () => {
    server.routes['gpu/sample'] = () => answer([10, 20]);
    await model.refresh();
    expect(server.calls[0].query).toEqual({});
    server.routes['gpu/sample'] = () =>
      answer([20, 30], { gpus: undefined, nvml: undefined });
    await model.refresh();
    const last = server.calls[server.calls.length - 1];
    expect(last).toEqual({
      endPoint: 'gpu/sample',
      method: 'POST',
      query: { inventory: 'inv-1', since: 20 }
    });
    expect(model.history.t).toEqual([10, 20, 30]);
  });

  it('says what a merge changed, so that views redraw only then', async () => {
    const results: unknown[] = [];
    model.dataChanged.connect((_, result) => results.push(result));
    server.routes['gpu/sample'] = () => answer([10, 20]);
    await model.refresh();
    server.routes['gpu/sample'] = () =>
      answer([20], { gpus: undefined, nvml: undefined });
    await model.refresh();
    expect(results).toEqual([
      { reset: true, inventoryChanged: true, added: 2 },
      { reset: false, inventoryChanged: false, added: 0 }
    ]);
  });

  it('shows a job node from a fresh history and keeps asking this server for the nodes', async () => {
    server.routes['gpu/sample'] = () => answer([10, 20], { nodes: [NODE] });
    await model.refresh();
    expect(model.nodes).toEqual([NODE]);

    server.routes['gpu'] = () => answer([30], { nodes: [NODE] });
    server.routes['jobs/job-abc/gpu'] = () =>
      answer([100, 110], { inventory: 'node-inv' });
    const cleared: boolean[] = [];
    model.dataChanged.connect(() => cleared.push(model.history.size === 0));
    model.select(nodeKey(NODE));
    expect(model.source).toEqual(NODE);
    expect(cleared[0]).toBe(true);
    await model.refresh();

    const asked = server.calls.slice(-2);
    expect(asked[0]).toMatchObject({
      endPoint: 'gpu',
      query: { inventory: 'inv-1', since: 20 }
    });
    expect(asked[1]).toMatchObject({
      endPoint: 'jobs/job-abc/gpu',
      query: { node: 1, attempt: 1 }
    });
    expect(model.history.t).toEqual([100, 110]);
  });

  it('goes back to this server, saying why, when the job node ended', async () => {
    server.routes['gpu/sample'] = () => answer([10], { nodes: [NODE] });
    await model.refresh();
    model.select(nodeKey(NODE));
    server.routes['gpu'] = () => answer([20], { nodes: [] });
    server.routes['gpu/sample'] = () => answer([20], { nodes: [] });
    await model.refresh();
    expect(model.source).toBeNull();
    expect(model.notice).toBe('Job ended: showing this server (job job-abc)');
  });

  it('keeps the valid settings and ignores the others', () => {
    model.updateSettings({
      pollInterval: 0.2,
      idleTimeout: 1,
      defaultRange: 'toString' as any
    });
    expect(model.settings).toEqual({
      pollInterval: 1,
      idleTimeout: 5,
      defaultRange: '15m'
    });
    expect(model.idleTimeout).toBe(5);
  });

  it('follows a new default range and tells the charts', () => {
    const ranges: string[] = [];
    model.rangeChanged.connect((_, range) => ranges.push(range));
    model.updateSettings({ defaultRange: '2h' });
    model.range = '2h';
    model.range = '1h';
    expect(ranges).toEqual(['2h', '1h']);
  });
});

describe('GpuHistory', () => {
  it('drops the samples older than the server history window', () => {
    const history = new GpuHistory();
    history.merge(answer([0, 10, 20], { history: 15 }));
    expect(history.t).toEqual([10, 20]);
    expect(history.gpu[0].util).toEqual([10, 20]);
  });

  it('starts over on a new inventory, keeping columns aligned', () => {
    const history = new GpuHistory();
    history.merge(answer([10, 20]));
    const result = history.merge(
      answer([30], {
        inventory: 'inv-2',
        gpus: [
          { index: 0, name: 'A', mem_total_mib: 1, power_limit_w: 1 },
          { index: 1, name: 'B', mem_total_mib: 1, power_limit_w: 1 }
        ]
      })
    );
    expect(result).toEqual({ reset: true, inventoryChanged: true, added: 1 });
    expect(history.t).toEqual([30]);
    expect(history.gpu).toHaveLength(2);
    expect(history.gpu[1].util).toEqual([null]);
  });

  it('gives the latest value of a column, null when none', () => {
    expect(GpuHistory.latest([1, 2, null])).toBeNull();
    expect(GpuHistory.latest([1, 2])).toBe(2);
    expect(GpuHistory.latest([])).toBeNull();
  });
});
