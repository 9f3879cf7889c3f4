import { formatClock } from '../../src/common/time';
import { GpuCard } from '../../src/gpu/cards';
import { healthBadges, healthLine } from '../../src/gpu/health';
import { GpuHistory } from '../../src/gpu/history';
import type { IGpuHealth } from '../../src/gpu/types';
import { answer } from './answers';

/** 14:02 of a day, in seconds, local time (as the panel writes it). */
const SINCE = new Date(2026, 11, 6, 14, 2, 30).getTime() / 1000;

function health(extra: Partial<IGpuHealth> = {}): IGpuHealth {
  return {
    problems: [],
    ecc: null,
    retired_pages: null,
    remapped_rows: null,
    xids_unwatched: null,
    unavailable: {},
    ...extra
  };
}

const THERMAL = {
  kind: 'thermal',
  text: 'thermal slowdown',
  severity: 'warn',
  since: SINCE,
  clock_percent: 31
};
const XID = {
  kind: 'xid',
  text: 'XID 79 (fallen off the bus) at 14:05:12',
  severity: 'error',
  since: SINCE + 162,
  clock_percent: null
};

describe('a GPU card says what its hardware reports', () => {
  it('names a throttle, since when, and the clock left; errors first', () => {
    const badges = healthBadges(health({ problems: [THERMAL, XID] }));
    expect(badges.map(b => [b.kind, b.text, b.severity])).toEqual([
      ['xid', 'XID 79 (fallen off the bus) at 14:05:12', 'error'],
      ['thermal', 'Thermal slowdown since 14:02 · 31 % of its clock', 'warn']
    ]);
    expect(formatClock(SINCE * 1000, 'minutes')).toBe('14:02');
  });

  it('has no badge for a healthy GPU, or one whose server sent no health', () => {
    expect(healthBadges(health())).toEqual([]);
    expect(healthBadges(undefined)).toEqual([]);
  });

  it('writes the figures a GPU reports and leaves out those it does not', () => {
    expect(healthLine(health())).toBe('');
    expect(
      healthLine(
        health({
          ecc: {
            corrected_volatile: 5,
            uncorrected_volatile: 2,
            corrected_aggregate: 17,
            uncorrected_aggregate: 3
          },
          remapped_rows: {
            corrected: 4,
            uncorrected: 1,
            pending: true,
            failed: false
          },
          xids_unwatched: 'Not Supported'
        })
      )
    ).toBe(
      'ECC 5 corrected, 2 uncorrected (17, 3 in its life) · 5 rows remapped, one pending · XIDs not watched: Not Supported'
    );
    expect(
      healthLine(
        health({
          retired_pages: { single_bit: 2, double_bit: 1, pending: false }
        })
      )
    ).toBe('3 pages retired');
  });

  it('shows the badges and the line on the card, and takes them away when gone', () => {
    const history = new GpuHistory();
    const ecc = {
      corrected_volatile: 0,
      uncorrected_volatile: 0,
      corrected_aggregate: null,
      uncorrected_aggregate: null
    };
    const sick = health({ problems: [THERMAL], ecc });
    history.merge(
      answer([10], {
        state: [{ status: 'ok', message: null, processes: [], health: sick }]
      })
    );
    const card = new GpuCard(history.gpus[0], 0);
    card.update(history);
    const problems = card.node.querySelectorAll('.jp-air-GpuCard-problem');
    expect(Array.from(problems).map(b => b.textContent)).toEqual([
      'Thermal slowdown since 14:02 · 31 % of its clock'
    ]);
    expect((problems[0] as HTMLElement).dataset.kind).toBe('thermal');
    expect(problems[0].classList.contains('jp-mod-warn')).toBe(true);
    expect(card.node.querySelector('.jp-air-GpuCard-health')?.textContent).toBe(
      'ECC 0 corrected, 0 uncorrected'
    );

    // An increment leaves out figures that did not change: the card keeps them.
    history.merge(
      answer([20], {
        gpus: undefined,
        nvml: undefined,
        state: [
          {
            status: 'ok',
            message: null,
            processes: [],
            health: { problems: [] }
          }
        ]
      })
    );
    card.update(history);
    expect(card.node.querySelectorAll('.jp-air-GpuCard-problem').length).toBe(
      0
    );
    expect(card.node.querySelector('.jp-air-GpuCard-health')?.textContent).toBe(
      'ECC 0 corrected, 0 uncorrected'
    );

    history.merge(
      answer([30], {
        gpus: undefined,
        nvml: undefined,
        state: [
          { status: 'ok', message: null, processes: [], health: health() }
        ]
      })
    );
    card.update(history);
    expect(card.node.querySelector('.jp-air-GpuCard-health')?.textContent).toBe(
      ''
    );
  });
});
