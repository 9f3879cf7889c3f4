/**
 * The cards of the GPU resources panel: one per GPU, one for the host.
 * They are built once per inventory and then only their texts change.
 */

import { chartHeight, IChartRow, IChartTheme, TimeWindow } from './charts';
import {
  formatMemory,
  formatOwner,
  formatPercent,
  formatPower,
  formatProcessMemory,
  formatTemperature,
  NA
} from './format';
import { healthBadges, healthLine } from './health';
import { GpuHistory } from './history';
import { migRows, OTHER_USERS_JOB } from './mig';
import { ISessionView, sessionsOn } from './sessions';
import type { IGpuInfo, IGpuProcess } from './types';
import { el } from '../dom';

/** A process of a job the caller may not view: only its memory is known. */
function isOtherUsers(process: IGpuProcess): boolean {
  return process.owner?.kind === 'other';
}

/**
 * A job's owner text followed by what its session is doing and its efficiency
 * hints, if it has any.
 */
function ownerText(process: IGpuProcess, session?: ISessionView): string {
  const owner = session
    ? `${formatOwner(process)} · ${session.activity}`
    : formatOwner(process);
  const hints = process.owner?.hints ?? [];
  return hints.length ? `${owner} ⚠ ${hints.join(' · ')}` : owner;
}

/** Set a text (and its title, for truncated text) only when it changed. */
function setText(node: HTMLElement, text: string, title = text): void {
  if (node.textContent !== text) {
    node.textContent = text;
  }
  if (node.title !== title) {
    node.title = title;
  }
}

/** One figure: a label and its current value (`.jp-air-value`). */
class Metric {
  constructor(metric: string, label: string) {
    this.node = el('div', 'jp-air-Metric');
    this.node.dataset.metric = metric;
    this.node.appendChild(el('span', 'jp-air-label', label));
    this._value = el('span', 'jp-air-value', NA);
    this.node.appendChild(this._value);
  }

  readonly node: HTMLDivElement;

  set(text: string, title = text): void {
    setText(this._value, text, title);
  }

  private _value: HTMLSpanElement;
}

/** What cards have in common: a chart drawn lazily. */
export abstract class Card {
  readonly node: HTMLDivElement;
  /** The chart container (plotly draws into it). */
  readonly chart: HTMLDivElement;
  /** The chart shows stale data (or none) and must be drawn again. */
  dirty = true;

  constructor(className: string, rows: number) {
    this.node = el('div', `jp-air-Card ${className}`);
    this.chart = el('div', 'jp-air-Card-chart');
    this.chart.style.height = `${chartHeight(rows)}px`;
  }

  /** The rows of the chart, from the model. */
  abstract rows(
    model: GpuHistory,
    window: TimeWindow,
    theme: IChartTheme
  ): IChartRow[];
}

/** A GPU: name, status, figures, chart, processes. */
export class GpuCard extends Card {
  /**
   * @param info - the GPU.
   * @param position - its position in the inventory (and the model's series).
   */
  constructor(
    readonly info: IGpuInfo,
    readonly position: number
  ) {
    super('jp-air-GpuCard', 3);
    this.node.dataset.gpuIndex = String(info.index);

    const header = el('div', 'jp-air-Card-header');
    const title = `GPU ${info.index}: ${info.name ?? NA}`;
    const name = el('div', 'jp-air-Card-title jp-air-GpuCard-name', title);
    name.title = info.uuid ? `${title}\n${info.uuid}` : title;
    header.appendChild(name);
    this.node.appendChild(header);

    this._badges = el('div', 'jp-air-GpuCard-badges');
    this.node.appendChild(this._badges);
    this._health = el('div', 'jp-air-GpuCard-health');
    this.node.appendChild(this._health);

    const metrics = el('div', 'jp-air-Card-metrics');
    metrics.append(
      this._util.node,
      this._mem.node,
      this._temp.node,
      this._power.node
    );
    this.node.appendChild(metrics);
    this.node.appendChild(this.chart);

    const table = el('table', 'jp-air-GpuCard-processes');
    const head = el('thead');
    const headRow = el('tr');
    for (const [label, cls] of [
      ['PID', 'jp-air-col-pid'],
      ['Process', 'jp-air-col-name'],
      ['Memory', 'jp-air-col-mem'],
      ['Owner', 'jp-air-col-owner']
    ]) {
      const th = el('th', cls, label);
      th.title = label;
      headRow.appendChild(th);
    }
    head.appendChild(headRow);
    table.appendChild(head);
    this._processes = el('tbody');
    table.appendChild(this._processes);
    this.node.appendChild(table);
    this._mig = el('table', 'jp-air-GpuCard-mig');
    this._mig.hidden = true;
    this.node.appendChild(this._mig);
  }

  /** Update the texts from the model. */
  update(model: GpuHistory): void {
    const series = model.gpu[this.position];
    const state = model.state[this.position];
    const info = this.info;
    const status = state?.status ?? 'ok';

    if (this.node.dataset.status !== status) {
      this.node.dataset.status = status;
      this.node.classList.toggle('jp-mod-lost', status === 'lost');
      this.node.classList.toggle('jp-mod-error', status === 'error');
    }
    const sessions = sessionsOn(state, model.now);
    const idle = sessions.filter(session => session.idle);
    this.node.classList.toggle('jp-mod-idleSession', idle.length > 0);
    const problems = healthBadges(state?.health);
    const badgeKey = [
      status,
      state?.message ?? '',
      ...sessions.map(session => session.badge),
      ...problems.map(problem => problem.text)
    ].join('\u0000');
    if (badgeKey !== this._badgeKey) {
      this._badgeKey = badgeKey;
      this._badges.textContent = '';
      if (status === 'lost') {
        const badge = el(
          'span',
          'jp-air-Badge jp-mod-error jp-air-GpuCard-lost',
          'GPU lost (fell off the bus)'
        );
        badge.title =
          state?.message ??
          'NVML reports this GPU as lost (NVML_ERROR_GPU_IS_LOST)';
        this._badges.appendChild(badge);
      } else if (status === 'error') {
        const text = `NVML error: ${state?.message ?? 'unknown'}`;
        const badge = el(
          'span',
          'jp-air-Badge jp-mod-warn jp-air-GpuCard-error',
          text
        );
        badge.title = text;
        this._badges.appendChild(badge);
      }
      for (const problem of problems) {
        const badge = el(
          'span',
          `jp-air-Badge jp-mod-${problem.severity} jp-air-GpuCard-problem`,
          problem.text
        );
        badge.title = problem.title;
        badge.dataset.kind = problem.kind;
        this._badges.appendChild(badge);
      }
      for (const session of sessions) {
        // An idle one holds GPUs for nothing: the costliest waste on a shared machine.
        const badge = el(
          'span',
          session.idle
            ? 'jp-air-Badge jp-air-GpuCard-session jp-mod-idleSession'
            : 'jp-air-Badge jp-air-GpuCard-session',
          session.badge
        );
        badge.title = session.title;
        badge.dataset.job = session.job;
        this._badges.appendChild(badge);
      }
    }

    this._util.set(formatPercent(series && GpuHistory.latest(series.util)));
    this._mem.set(
      formatMemory(series && GpuHistory.latest(series.mem), info.mem_total_mib)
    );
    this._temp.set(formatTemperature(series && GpuHistory.latest(series.temp)));
    this._power.set(
      formatPower(series && GpuHistory.latest(series.power), info.power_limit_w)
    );
    setText(this._health, healthLine(state?.health));
    this._updateProcesses(state?.processes ?? [], sessions);
    this._updateMig(migRows(state));
  }

  /** A GPU in MIG mode: a row per slice (profile, memory, its processes). */
  private _updateMig(rows: ReturnType<typeof migRows>): void {
    const key = rows
      .map(r => [r.slice, r.memory, r.processes].join('\u0000'))
      .join('\u0001');
    if (key === this._migKey) {
      return;
    }
    this._migKey = key;
    this._mig.hidden = rows.length === 0;
    const head = el('tr');
    for (const label of ['MIG slice', 'Memory', 'Processes']) {
      head.appendChild(el('th', '', label));
    }
    const body = rows.map(row => {
      const tr = el('tr', 'jp-air-GpuCard-migSlice');
      tr.title = row.title;
      for (const text of [row.slice, row.memory, row.processes]) {
        const td = el('td', '', text);
        td.title = text;
        tr.appendChild(td);
      }
      return tr;
    });
    this._mig.replaceChildren(head, ...body);
  }

  rows(model: GpuHistory, window: TimeWindow, theme: IChartTheme): IChartRow[] {
    const series = model.gpu[this.position] ?? {
      util: [],
      mem: [],
      temp: [],
      power: []
    };
    const total = this.info.mem_total_mib;
    const temp = window.ys(series.temp);
    let hottest = 0;
    for (const v of temp) {
      if (v !== null && v > hottest) {
        hottest = v;
      }
    }
    // 0-100 °C, widened by 20 °C steps if the GPU runs hotter.
    const tempMax = hottest > 95 ? Math.ceil((hottest + 5) / 20) * 20 : 100;
    return [
      {
        y: window.ys(series.util),
        color: theme.lineColors.util,
        range: [0, 100],
        suffix: ' %'
      },
      {
        y: window.ys(series.mem, 1 / 1024),
        color: theme.lineColors.mem,
        range: total ? [0, total / 1024] : undefined,
        suffix: ' GiB'
      },
      {
        y: temp,
        color: theme.lineColors.temp,
        range: [0, tempMax],
        suffix: ' °C'
      }
    ];
  }

  private _updateProcesses(
    processes: IGpuProcess[],
    sessions: ISessionView[]
  ): void {
    const sessionOf = (p: IGpuProcess) =>
      p.owner?.session
        ? sessions.find(session => session.job === p.owner?.id)
        : undefined;
    const rows = processes.map(p =>
      isOtherUsers(p)
        ? [NA, NA, formatProcessMemory(p.mem_mib), OTHER_USERS_JOB]
        : [
            String(p.pid),
            p.name || NA,
            formatProcessMemory(p.mem_mib),
            ownerText(p, sessionOf(p))
          ]
    );
    const key = rows.map(r => r.join('\u0000')).join('\u0001');
    if (key === this._processKey) {
      return;
    }
    this._processKey = key;
    const body = this._processes;
    body.textContent = '';
    if (!rows.length) {
      const tr = el('tr', 'jp-air-GpuCard-noProcess');
      const td = el('td', '', 'No processes');
      td.colSpan = 4;
      tr.appendChild(td);
      body.appendChild(tr);
      return;
    }
    const classes = [
      'jp-air-col-pid',
      'jp-air-col-name',
      'jp-air-col-mem',
      'jp-air-col-owner'
    ];
    processes.forEach((process, k) => {
      const tr = el('tr', 'jp-air-GpuCard-process');
      if (isOtherUsers(process)) {
        tr.classList.add('jp-mod-otherUser');
      } else {
        tr.dataset.pid = String(process.pid);
      }
      const session = sessionOf(process);
      if (session) {
        tr.dataset.session = session.idle ? 'idle' : 'running';
        tr.classList.toggle('jp-mod-idleSession', session.idle);
      }
      rows[k].forEach((text, c) => {
        const td = el('td', classes[c], text);
        td.title = text;
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
  }

  private _util = new Metric('util', 'Utilization');
  private _mem = new Metric('mem', 'Memory');
  private _temp = new Metric('temp', 'Temperature');
  private _power = new Metric('power', 'Power');
  private _badges: HTMLDivElement;
  private _badgeKey = '';
  private _health: HTMLDivElement;
  private _processes: HTMLTableSectionElement;
  private _processKey: string | null = null;
  private _mig: HTMLTableElement;
  private _migKey: string | null = null;
}

/** The host: CPU and memory, shown with or without GPUs. */
export class HostCard extends Card {
  constructor() {
    super('jp-air-HostCard', 2);
    const header = el('div', 'jp-air-Card-header');
    this._title = el('div', 'jp-air-Card-title jp-air-HostCard-name', 'Host');
    header.appendChild(this._title);
    this.node.appendChild(header);

    const metrics = el('div', 'jp-air-Card-metrics');
    metrics.append(this._cpu.node, this._mem.node);
    this.node.appendChild(metrics);
    this.node.appendChild(this.chart);
  }

  update(model: GpuHistory): void {
    const host = model.host;
    const parts = ['Host'];
    if (host.hostname) {
      parts[0] = `Host: ${host.hostname}`;
    }
    if (host.cpu_count) {
      parts.push(`${host.cpu_count} CPUs`);
    }
    setText(this._title, parts.join(' · '));
    this._cpu.set(formatPercent(GpuHistory.latest(model.cpu)));
    this._mem.set(
      formatMemory(GpuHistory.latest(model.mem), host.mem_total_mib ?? null)
    );
  }

  rows(model: GpuHistory, window: TimeWindow, theme: IChartTheme): IChartRow[] {
    const total = model.host.mem_total_mib;
    return [
      {
        y: window.ys(model.cpu),
        color: theme.lineColors.cpu,
        range: [0, 100],
        suffix: ' %'
      },
      {
        y: window.ys(model.mem, 1 / 1024),
        color: theme.lineColors.mem,
        range: total ? [0, total / 1024] : undefined,
        suffix: ' GiB'
      }
    ];
  }

  private _title: HTMLDivElement;
  private _cpu = new Metric('cpu', 'CPU');
  private _mem = new Metric('mem', 'Memory');
}
