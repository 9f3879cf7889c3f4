import { APIError } from '../../src/common/api';
import type { Requester } from '../../src/common/api';
import {
  IProfile,
  IProfiles,
  ProfilePanel,
  profileState,
  renderFinished
} from '../../src/logs/profile';

const waiting: IProfile = {
  id: '20261206-073251-018227',
  attempt: 1,
  steps: 5,
  ranks: 2,
  requested: 1,
  by: 'alice',
  state: 'waiting',
  answered: [1],
  errors: {},
  finished: null
};

const done: IProfile = {
  ...waiting,
  state: 'done',
  answered: [0, 1],
  finished: {
    text: '',
    notes: [],
    merged: 'merged.json.gz',
    artifacts: { run_id: 'r1', path: `profile/${waiting.id}`, error: null },
    summary: {
      clocks: 'one host (vm): one clock',
      notes: [],
      ranks: [0, 1].map(rank => ({
        rank,
        host: 'vm',
        steps: 5,
        step_s: 0.0359,
        compute: 0.18,
        comm: 0.1,
        idle: 0.72,
        on_gpu: false
      })),
      operators: [
        { name: 'gloo:all_reduce', calls: 10, self_s: 0.044, share: 0.42 },
        { name: 'aten::mm', calls: 30, self_s: 0.0164, share: 0.16 }
      ]
    }
  }
};

/** A server that answers the panel's calls from a list, and records them. */
function server(answers: unknown[]): { request: Requester; calls: string[] } {
  const calls: string[] = [];
  const request = (async (path: string, init: RequestInit = {}) => {
    calls.push(`${init.method ?? 'GET'} ${path} ${init.body ?? ''}`.trim());
    const next = answers.shift();
    if (next instanceof Error) {
      throw next;
    }
    return next;
  }) as Requester;
  return { request, calls };
}

const settle = () => new Promise(resolve => setTimeout(resolve, 0));

describe('profileState', () => {
  it('says how many ranks are done while it waits, then what it covers', () => {
    expect(profileState(waiting)).toBe(
      'Profiling the next 5 steps… (1 of 2 ranks done)'
    );
    expect(profileState(done)).toBe('Profile of 5 steps on 2 ranks');
    const oneMissing = {
      ...done,
      finished: {
        ...done.finished!,
        summary: {
          ...done.finished!.summary!,
          ranks: [done.finished!.summary!.ranks[0]]
        }
      }
    };
    expect(profileState(oneMissing)).toBe(
      'Profile of 5 steps: 1 of 2 ranks did not answer'
    );
  });
});

describe('renderFinished', () => {
  it("shows each rank's split, the operators and the merged trace", () => {
    const nodes = renderFinished(done, '/trace');
    const [ranks, operators, links] = nodes;
    expect(ranks.querySelectorAll('tbody tr')).toHaveLength(2);
    expect(ranks.querySelector('tbody tr')!.textContent).toBe(
      '0vm535.9 ms18 %10 %72 %'
    );
    expect(operators.querySelector('tbody tr')!.textContent).toBe(
      '44.00 ms42 %10gloo:all_reduce'
    );
    const trace = links.querySelector('a')!;
    expect(trace.getAttribute('href')).toBe('/trace');
    expect(links.textContent).toContain(
      `Kept on the run under profile/${done.id}/`
    );
  });
});

describe('ProfilePanel', () => {
  it('is hidden for an ended job without profiles', async () => {
    const { request } = server([{ job: 'j', running: false, profiles: [] }]);
    const panel = new ProfilePanel({ jobId: 'j', request, traceUrl: id => id });
    await settle();
    expect(panel.isHidden).toBe(true);
    panel.dispose();
  });

  it('asks for a profile, then shows it once finished', async () => {
    const listing = (profiles: IProfile[]): IProfiles => ({
      job: 'j',
      running: true,
      profiles
    });
    const { request, calls } = server([listing([]), waiting, listing([done])]);
    const panel = new ProfilePanel({ jobId: 'j', request, traceUrl: id => id });
    await settle();
    expect(panel.isHidden).toBe(false);
    await panel.start();
    expect(calls).toEqual([
      'GET jobs/j/profiles',
      'POST jobs/j/profiles {"steps":5}',
      'GET jobs/j/profiles'
    ]);
    expect(
      panel.node.querySelector('.jp-air-JobProfile-status')!.textContent
    ).toBe('Profile of 5 steps on 2 ranks');
    expect(
      panel.node.querySelectorAll('.jp-air-JobProfile-ranks tbody tr')
    ).toHaveLength(2);
    panel.dispose();
  });

  it('says why the server refused, as it said it', async () => {
    const refused = new APIError(
      "You don't have CAN_MANAGE_RUN on job j: its owner, alice, can grant it",
      'forbidden',
      403
    );
    const { request } = server([
      { job: 'j', running: true, profiles: [] },
      refused
    ]);
    const panel = new ProfilePanel({ jobId: 'j', request, traceUrl: id => id });
    await settle();
    await panel.start();
    const status = panel.node.querySelector('.jp-air-JobProfile-status')!;
    expect(status.textContent).toBe(refused.message);
    expect(status.classList.contains('jp-mod-error')).toBe(true);
    expect(panel.node.querySelector('button')!.disabled).toBe(false);
    panel.dispose();
  });
});
