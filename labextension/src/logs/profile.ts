/**
 * A profile on demand in the logs view (issue 38, item 5): the Profile action
 * (every running rank turns torch.profiler on for its next N steps, then
 * off), then the latest profile's summary, each rank's compute /
 * communication / idle split and the top operators by self time, and its
 * merged trace to download for Perfetto or chrome://tracing.
 */

import { APIError } from '../common/api';
import type { Requester } from '../common/api';
import { el } from '../dom';

/** One rank's profiled steps, as `perf.traces.Summary.to_json` says them. */
export interface IRankSplit {
  rank: number;
  host: string;
  steps: number;
  step_s: number | null;
  compute: number;
  comm: number;
  idle: number;
  on_gpu: boolean;
}

export interface IOperator {
  name: string;
  calls: number;
  self_s: number;
  share: number;
}

export interface IProfileSummary {
  ranks: IRankSplit[];
  operators: IOperator[];
  clocks: string;
  notes: string[];
}

/** A profile as the API gives it (`GET jupyter-air/jobs/<id>/profiles`). */
export interface IProfile {
  id: string;
  attempt: number;
  steps: number;
  ranks: number;
  requested: number;
  by: string;
  state: 'waiting' | 'done' | 'incomplete';
  answered: number[];
  errors: Record<string, string>;
  finished: {
    summary: IProfileSummary | null;
    text: string;
    merged?: string;
    notes: string[];
    artifacts?: { run_id: string | null; path: string; error: string | null };
  } | null;
}

export interface IProfiles {
  job: string;
  running: boolean;
  profiles: IProfile[];
}

/** Milliseconds between two looks at a profile that is not finished yet. */
const POLL_MS = 1000;

/** A share as the CLI says it: `42 %`. */
export function percent(share: number): string {
  return `${Math.round(share * 100)} %`;
}

/** Where a profile stands, in a few words. */
export function profileState(profile: IProfile): string {
  if (profile.finished) {
    const missing =
      profile.ranks - (profile.finished.summary?.ranks.length ?? 0);
    return missing > 0
      ? `Profile of ${profile.steps} steps: ${missing} of ${profile.ranks} ranks did not answer`
      : `Profile of ${profile.steps} steps on ${profile.ranks} ranks`;
  }
  const done = profile.answered.length;
  return `Profiling the next ${profile.steps} steps… (${done} of ${profile.ranks} ranks done)`;
}

/**
 * The Profile action and the latest profile of one job, in `node` (plain DOM:
 * the view places it under its header). `traceUrl` is the download address
 * of a profile's merged trace.
 */
export class ProfilePanel {
  constructor(options: ProfilePanel.IOptions) {
    this._jobId = options.jobId;
    this._request = options.request;
    this._traceUrl = options.traceUrl;
    this.node.className = 'jp-air-JobProfile';
    this.node.setAttribute('aria-label', 'Profile');
    const bar = el('div', 'jp-air-JobProfile-bar');
    this._button = el(
      'button',
      'jp-air-JobProfile-start jp-mod-styled',
      'Profile'
    );
    this._button.title =
      'Turn torch.profiler on in every rank for its next steps, then off (needs CAN_MANAGE_RUN)';
    this._button.addEventListener('click', () => void this.start());
    const label = el('label', 'jp-air-JobProfile-stepsLabel', 'next ');
    this._steps = el('input', 'jp-air-JobProfile-steps');
    this._steps.type = 'number';
    this._steps.min = '1';
    this._steps.max = '100';
    this._steps.value = '5';
    this._steps.setAttribute('aria-label', 'Steps to profile');
    label.append(this._steps, ' steps');
    this._status = el('span', 'jp-air-JobProfile-status');
    bar.append(this._button, label, this._status);
    this._content = el('div', 'jp-air-JobProfile-content');
    this.node.append(bar, this._content);
    this.node.hidden = true;
    void this.refresh();
  }

  /** The panel's element. */
  readonly node = el('div');

  /** Whether it is hidden (an ended job without profiles). */
  get isHidden(): boolean {
    return this.node.hidden;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Whether the job runs (the action is offered only then). */
  setRunning(running: boolean): void {
    if (this._running !== running) {
      this._running = running;
      this._render();
    }
  }

  /** Ask every running rank for a profile of its next steps. */
  async start(): Promise<void> {
    const steps = Number(this._steps.value) || 5;
    this._busy = true;
    this._error = '';
    this._running = true;
    this._render();
    try {
      await this._request<IProfile>(this._path(), {
        method: 'POST',
        body: JSON.stringify({ steps })
      });
    } catch (error) {
      this._busy = false;
      this._error = error instanceof APIError ? error.message : String(error);
      this._render();
      return;
    }
    await this.refresh();
  }

  /** Read the job's profiles again; look again soon while one is not finished. */
  async refresh(): Promise<void> {
    window.clearTimeout(this._timer);
    let listing: IProfiles;
    try {
      listing = await this._request<IProfiles>(this._path());
    } catch (error) {
      this._error = error instanceof APIError ? error.message : String(error);
      this._busy = false;
      this._render();
      return;
    }
    if (this.isDisposed) {
      return;
    }
    this._running = listing.running;
    this._latest = listing.profiles[listing.profiles.length - 1] ?? null;
    this._busy = this._latest !== null && this._latest.finished === null;
    this._render();
    if (this._busy) {
      this._timer = window.setTimeout(() => void this.refresh(), POLL_MS);
    }
  }

  dispose(): void {
    this._disposed = true;
    window.clearTimeout(this._timer);
    this.node.remove();
  }

  private _path(): string {
    return `jobs/${encodeURIComponent(this._jobId)}/profiles`;
  }

  private _render(): void {
    const latest = this._latest;
    this.node.hidden = !this._running && latest === null && !this._error;
    this._button.disabled = this._busy || !this._running;
    this._steps.disabled = this._busy || !this._running;
    this._status.classList.toggle('jp-mod-error', !!this._error);
    this._status.textContent =
      this._error || (latest ? profileState(latest) : '');
    this._content.replaceChildren(
      ...(latest?.finished
        ? renderFinished(latest, this._traceUrl(latest.id))
        : [])
    );
  }

  private _jobId: string;
  private _request: Requester;
  private _traceUrl: (profileId: string) => string;
  private _button: HTMLButtonElement;
  private _steps: HTMLInputElement;
  private _status: HTMLSpanElement;
  private _content: HTMLDivElement;
  private _latest: IProfile | null = null;
  private _running = false;
  private _busy = false;
  private _error = '';
  private _timer = 0;
  private _disposed = false;
}

export namespace ProfilePanel {
  export interface IOptions {
    jobId: string;
    request: Requester;
    traceUrl: (profileId: string) => string;
  }
}

/** A finished profile: the split, the operators, the trace, where it is kept. */
export function renderFinished(
  profile: IProfile,
  traceUrl: string
): HTMLElement[] {
  const finished = profile.finished!;
  const summary = finished.summary;
  const out: HTMLElement[] = [];
  if (summary) {
    out.push(
      table(
        'jp-air-JobProfile-ranks',
        ['Rank', 'Host', 'Steps', 'Step', 'Compute', 'Comm', 'Idle'],
        summary.ranks.map(r => [
          String(r.rank),
          r.host,
          String(r.steps),
          r.step_s === null ? '–' : `${(r.step_s * 1000).toFixed(1)} ms`,
          percent(r.compute),
          percent(r.comm),
          percent(r.idle)
        ])
      ),
      table(
        'jp-air-JobProfile-operators',
        ['Self', 'Share', 'Calls', 'Operator (top by self time, all ranks)'],
        summary.operators
          .slice(0, 10)
          .map(o => [
            `${(o.self_s * 1000).toFixed(2)} ms`,
            percent(o.share),
            String(o.calls),
            o.name
          ])
      )
    );
  }
  const notes = summary ? summary.notes : finished.notes;
  for (const note of notes) {
    out.push(el('div', 'jp-air-JobProfile-note', note));
  }
  const links = el('div', 'jp-air-JobProfile-links');
  if (finished.merged) {
    const a = el('a', 'jp-air-JobProfile-trace', 'Download the merged trace');
    a.href = traceUrl;
    a.download = `${profile.id}.json.gz`;
    links.append(a, ' (open it in Perfetto or chrome://tracing)');
  }
  const kept = finished.artifacts;
  if (kept) {
    links.append(
      el(
        'span',
        'jp-air-JobProfile-kept',
        kept.error
          ? ` Not kept on the run: ${kept.error}`
          : ` Kept on the run under ${kept.path}/`
      )
    );
  }
  out.push(links);
  return out;
}

function table(
  className: string,
  head: string[],
  rows: string[][]
): HTMLTableElement {
  const node = el('table', className);
  const tr = el('tr');
  tr.append(...head.map(text => el('th', undefined, text)));
  node.append(el('thead'), el('tbody'));
  node.tHead!.append(tr);
  for (const row of rows) {
    const line = el('tr');
    line.append(...row.map(text => el('td', undefined, text)));
    node.tBodies[0].append(line);
  }
  return node;
}
