/**
 * The header of the "Job logs" view: the job, its attempts, the search box,
 * filters and actions, and a line of counts and messages. Drawn with React
 * from the model on every state change; what the user does calls the model.
 */

import {
  bugIcon,
  circleEmptyIcon,
  circleIcon,
  closeIcon,
  copyIcon,
  downloadIcon,
  HTMLSelect,
  InputGroup,
  ReactWidget,
  searchIcon,
  ToolbarButtonComponent,
  UseSignal
} from '@jupyterlab/ui-components';
import * as React from 'react';

import { ansiSegments } from './ansi';
import { attemptNotes } from './attempt';
import { cellLabel } from './cells';
import { isLevelKey, isRangeKey, LEVELS, RANGES } from './filters';
import { progressLine, progressTitle } from '../common/progress';
import { formatClock } from '../common/time';
import { plural } from './format';
import type { JobLogsModel } from './model';
import { rankStacksText, rankStacksTitle, stackSetTitle } from './stacks';
import { infoOf } from './status';
import type { IJob, IStackSet } from './types';

/** Milliseconds of typing pause before a search is sent. */
const SEARCH_DELAY = 300;

const LEVEL_OPTIONS = Object.entries(LEVELS).map(([value, label]) => ({
  value,
  label
}));

const RANGE_OPTIONS = Object.entries(RANGES).map(([value, { label }]) => ({
  value,
  label
}));

/** `''` ("all") or the number chosen. */
function numberOrNull(value: string): number | null {
  return value === '' ? null : Number(value);
}

/** Run name, owner, size and times of the job. */
function metaOf(job: IJob | null): string {
  if (!job) {
    return '';
  }
  const meta: string[] = job.kind === 'session' ? ['warm session'] : [];
  if (job.run_name) {
    meta.push(job.run_name);
  }
  meta.push(job.owner);
  meta.push(
    job.nnodes > 1
      ? `${job.nnodes} nodes × ${plural(job.nproc_per_node, 'rank')}`
      : plural(job.nproc_per_node, 'rank')
  );
  if (job.started) {
    meta.push(`started ${formatClock(job.started * 1000)}`);
  }
  if (job.ended) {
    meta.push(`ended ${formatClock(job.ended * 1000)}`);
  }
  return meta.join(' · ');
}

/** Status, run name and times, the attempts and the chosen one's run link. */
function TitleRow(props: { model: JobLogsModel }): JSX.Element {
  const { model } = props;
  const job = model.job;
  const attempt = model.filters.attempt;
  const attempts = job?.attempts ?? [];
  const shown = attempts.find(a => a.attempt === attempt);
  const url = shown?.run_url ?? null;
  return (
    <div className="jp-air-JobLogs-titleRow">
      <span className="jp-air-JobLogs-jobId">{model.jobId}</span>
      <span
        className="jp-air-JobLogs-status"
        aria-label="Job status"
        data-status={job?.status.toLowerCase() ?? ''}
      >
        {job?.status ?? '…'}
      </span>
      <span className="jp-air-JobLogs-meta">{metaOf(job)}</span>
      <HTMLSelect
        className="jp-air-JobLogs-attempt"
        title="Attempt"
        aria-label="Attempt"
        disabled={attempts.length < 2}
        options={attempts.map(a => ({
          value: String(a.attempt),
          label: `Attempt ${a.attempt} · ${a.status}`
        }))}
        value={attempt === null ? '' : String(attempt)}
        onChange={event => {
          const chosen = Number(event.target.value);
          if (Number.isInteger(chosen) && chosen > 0) {
            model.setAttempt(chosen);
          }
        }}
      />
      {url && (
        <a
          className="jp-air-JobLogs-runLink"
          href={url}
          target="_blank"
          rel="noopener noreferrer"
          title={`MLflow run ${shown?.run_id ?? ''}`.trim()}
        >
          MLflow run ↗
        </a>
      )}
    </div>
  );
}

/** How far the attempt shown is (its ranks' step marks), and its MFU. */
function ProgressRow(props: { model: JobLogsModel }): JSX.Element | null {
  const { model } = props;
  const progress = model.job?.attempts.find(
    a => a.attempt === model.filters.attempt
  )?.progress;
  if (!progress) {
    return null;
  }
  const fraction = progress.fraction;
  return (
    <div
      className="jp-air-JobLogs-progress"
      aria-label="Progress"
      title={progressTitle(progress)}
    >
      {fraction !== null && (
        <progress
          className="jp-air-JobLogs-progressBar"
          max={1}
          value={fraction}
        />
      )}
      <span className="jp-air-JobLogs-progressLine">
        {progressLine(progress)}
      </span>
    </div>
  );
}

/**
 * The search box: sent after a typing pause, at once on Enter; Escape clears
 * it. The text typed is the input's own until it is sent.
 */
function SearchBox(props: { model: JobLogsModel }): JSX.Element {
  const { model } = props;
  const timer = React.useRef<number | undefined>(undefined);
  React.useEffect(() => () => window.clearTimeout(timer.current), []);
  const send = (value: string, delay: number) => {
    window.clearTimeout(timer.current);
    const apply = () => model.setFilters({ search: value });
    if (delay) {
      timer.current = window.setTimeout(apply, delay);
    } else {
      apply();
    }
  };
  return (
    <InputGroup
      className="jp-air-JobLogs-search"
      type="search"
      placeholder="Search"
      title="Show only the lines that contain this text (case-insensitive)"
      aria-label="Search the lines"
      spellCheck={false}
      rightIcon={searchIcon}
      defaultValue={model.filters.search}
      onChange={event => send(event.currentTarget.value, SEARCH_DELAY)}
      onKeyDown={event => {
        const input = event.currentTarget;
        if (event.key === 'Enter') {
          send(input.value, 0);
        } else if (event.key === 'Escape' && input.value) {
          event.stopPropagation();
          input.value = '';
          send('', 0);
        }
      }}
    />
  );
}

/** The node or rank picker: all, or one of `choices`. */
function OriginSelect(props: {
  model: JobLogsModel;
  kind: 'node' | 'rank';
  choices: number[];
}): JSX.Element {
  const { model, kind, choices } = props;
  const name = kind === 'node' ? 'Node' : 'Rank';
  const chosen = model.filters[kind];
  return (
    <HTMLSelect
      className={`jp-air-JobLogs-${kind}`}
      title={name}
      aria-label={name}
      options={[
        { value: '', label: `All ${kind}s` },
        ...choices.map(c => ({ value: String(c), label: `${name} ${c}` }))
      ]}
      value={chosen === null ? '' : String(chosen)}
      onChange={event =>
        model.setFilters({ [kind]: numberOrNull(event.target.value) })
      }
    />
  );
}

/** A session's cell picker: the whole session, or one cell. */
function CellSelect(props: { model: JobLogsModel }): JSX.Element {
  const { model } = props;
  const chosen = model.filters.cell;
  const options = [
    { value: '', label: 'All cells' },
    ...model.cells.map(c => ({ value: String(c.cell), label: cellLabel(c) }))
  ];
  if (chosen !== null && !model.cells.some(c => c.cell === chosen)) {
    options.push({ value: String(chosen), label: `Cell ${chosen} · running` });
  }
  // The picker may be too narrow for its label (cut with an ellipsis): the tooltip has it.
  const shown = options.find(
    o => o.value === (chosen === null ? '' : String(chosen))
  );
  return (
    <HTMLSelect
      className="jp-air-JobLogs-cell"
      title={shown ? `Session cell: ${shown.label}` : 'Session cell'}
      aria-label="Session cell"
      options={options}
      value={chosen === null ? '' : String(chosen)}
      onChange={event =>
        model.setFilters({ cell: numberOrNull(event.target.value) })
      }
    />
  );
}

/** A Copy button; the model says how the copy went. */
function CopyButton(props: {
  className: string;
  tooltip: string;
  copy: () => Promise<boolean>;
}): JSX.Element {
  return (
    <ToolbarButtonComponent
      className={props.className}
      label="Copy"
      icon={copyIcon}
      tooltip={props.tooltip}
      onClick={() => void props.copy()}
    />
  );
}

/** Cell, node, rank, level and range pickers, and Follow, Copy and Download. */
function Toolbar(props: {
  model: JobLogsModel;
  downloadUrl: () => string;
}): JSX.Element {
  const { model, downloadUrl } = props;
  const filters = model.filters;
  const { nodes, ranks } = model.origins;
  const active = !model.done;
  const following = model.following && active;
  return (
    <div className="jp-air-JobLogs-toolbar">
      <SearchBox model={model} />
      {model.session && <CellSelect model={model} />}
      <OriginSelect model={model} kind="node" choices={nodes} />
      <OriginSelect model={model} kind="rank" choices={ranks} />
      <HTMLSelect
        className="jp-air-JobLogs-level"
        title="Level"
        aria-label="Level"
        options={LEVEL_OPTIONS}
        value={filters.level}
        onChange={event => {
          const level = event.target.value;
          model.setFilters({ level: isLevelKey(level) ? level : '' });
        }}
      />
      <HTMLSelect
        className="jp-air-JobLogs-range"
        title="Time range"
        aria-label="Time range"
        options={RANGE_OPTIONS}
        value={filters.range}
        onChange={event => {
          const range = event.target.value;
          model.setFilters({ range: isRangeKey(range) ? range : 'all' });
        }}
      />
      <span className="jp-air-JobLogs-spacer" />
      <ToolbarButtonComponent
        className="jp-air-JobLogs-follow"
        label="Follow"
        icon={circleEmptyIcon}
        pressedIcon={circleIcon}
        pressed={following}
        enabled={active}
        tooltip="Paused: click (or scroll to the bottom) to follow new lines"
        pressedTooltip="Following new lines: click (or scroll up) to pause"
        disabledTooltip="The job has ended: nothing more to follow"
        onClick={() => model.setFollowing(!model.following)}
      />
      <ToolbarButtonComponent
        className="jp-air-JobLogs-stacks"
        label="Stacks"
        icon={bugIcon}
        enabled={!model.stacksPending}
        tooltip={
          active
            ? "Every running rank's Python stacks, now: where the job is stuck"
            : 'The stacks taken of its ranks (at a likely hang, at a cancel after one)'
        }
        disabledTooltip="Taking the stacks…"
        onClick={() => void model.showStacks()}
      />
      <CopyButton
        className="jp-air-JobLogs-copy"
        tooltip="Copy the loaded lines as text"
        copy={() => model.copy()}
      />
      {/* A link, so that the browser downloads it under `download`'s name. */}
      <a
        className="jp-air-JobLogs-button jp-air-JobLogs-download"
        href={downloadUrl()}
        download={model.filename}
        title="Download every line that matches the filters"
        // The link is followed after this handler: the time range ends now.
        onClick={event => {
          event.currentTarget.href = downloadUrl();
        }}
      >
        <downloadIcon.react tag="span" stylesheet="toolbarButton" />
        <span className="jp-air-JobLogs-buttonLabel">Download</span>
      </a>
    </div>
  );
}

/**
 * The jobs related to this one: the job that started it (a scheduled
 * notebook's task, for its cells' jobs), and the jobs it started.
 */
function FamilyRow(props: {
  model: JobLogsModel;
  openJob: (jobId: string) => void;
}): JSX.Element | null {
  const { model, openJob } = props;
  const job = model.job;
  if (!job || (!job.parent_id && job.children.length === 0)) {
    return null;
  }
  const link = (jobId: string, title: string) => (
    <button
      key={jobId}
      type="button"
      className="jp-air-JobLogs-jobLink"
      data-job-id={jobId}
      title={title}
      onClick={() => openJob(jobId)}
    >
      {jobId}
    </button>
  );
  return (
    <div className="jp-air-JobLogs-family">
      {job.parent_id && (
        <span className="jp-air-JobLogs-parent">
          Started by job{' '}
          {link(
            job.parent_id,
            'Open the logs of the job that started this one'
          )}
        </span>
      )}
      {job.children.length > 0 && (
        <span className="jp-air-JobLogs-children">
          Jobs it started:{' '}
          {job.children.map(child =>
            link(child, 'Open the logs of a job this one started')
          )}
        </span>
      )}
    </div>
  );
}

/** The stacks shown: each set's time and reason, then each rank's dump. */
function StacksRow(props: { model: JobLogsModel }): JSX.Element | null {
  const { model } = props;
  const sets = model.stacks;
  if (!sets || !sets.length) {
    return null;
  }
  return (
    <div className="jp-air-JobLogs-stacksPanel" aria-label="Stacks">
      <div className="jp-air-JobLogs-stacksTitle">
        <span>Stacks of the ranks</span>
        <span className="jp-air-JobLogs-spacer" />
        <CopyButton
          className="jp-air-JobLogs-stacksCopy"
          tooltip="Copy the stacks as plain text"
          copy={() => model.copyStacks()}
        />
        <ToolbarButtonComponent
          className="jp-air-JobLogs-stacksClose"
          icon={closeIcon}
          tooltip="Close the stacks"
          onClick={() => model.hideStacks()}
        />
      </div>
      {sets.map(set => (
        <StackSetView key={`${set.attempt}-${set.name}`} set={set} />
      ))}
    </div>
  );
}

/**
 * py-spy's dump in its terminal colours, with JupyterLab's ANSI classes (a
 * notebook's output has the same): React adds each run as text, never as HTML.
 */
function StackDump(props: { text: string }): JSX.Element {
  return (
    <div className="jp-RenderedText jp-air-JobLogs-stackDump">
      <pre>
        {ansiSegments(props.text).map((segment, i) =>
          segment.classes.length ? (
            <span key={i} className={segment.classes.join(' ')}>
              {segment.text}
            </span>
          ) : (
            segment.text
          )
        )}
      </pre>
    </div>
  );
}

function StackSetView(props: { set: IStackSet }): JSX.Element {
  const { set } = props;
  return (
    <section className="jp-air-JobLogs-stackSet">
      <h3>{stackSetTitle(set)}</h3>
      {set.hang && (
        <div
          className={`jp-air-JobLogs-hang jp-air-JobLogs-hang-${set.hang.kind}`}
          aria-label="Collectives"
        >
          <div className="jp-air-JobLogs-hangLine">{set.hang.line}</div>
          {set.hang.details.map((line, i) => (
            <div key={i} className="jp-air-JobLogs-hangDetail">
              {line}
            </div>
          ))}
        </div>
      )}
      {set.ranks.map(rank => (
        <div
          key={`${rank.node}-${rank.rank}`}
          className="jp-air-JobLogs-rankStacks"
        >
          <h4>{rankStacksTitle(rank)}</h4>
          <StackDump text={rankStacksText(rank)} />
        </div>
      ))}
    </section>
  );
}

/** Counts, notes and messages (copy, errors). */
/** How the attempt shown failed, and where it resumed from, when it did. */
function AttemptRow(props: { model: JobLogsModel }): JSX.Element | null {
  const { model } = props;
  const attempt = model.job?.attempts.find(
    a => a.attempt === model.filters.attempt
  );
  const { cause, resumed } = attemptNotes(attempt);
  if (!cause && !resumed) {
    return null;
  }
  return (
    <div className="jp-air-JobLogs-attemptNotes">
      {cause && (
        <div className="jp-air-JobLogs-cause" title={cause}>
          Attempt {attempt?.attempt} failed: {cause}
        </div>
      )}
      {resumed && (
        <div className="jp-air-JobLogs-resumed" title={resumed}>
          {resumed}
        </div>
      )}
    </div>
  );
}

/** What of the job's runs waits for its tracking server, when anything does. */
function TrackingRow(props: { model: JobLogsModel }): JSX.Element | null {
  const line = props.model.job?.tracking;
  if (!line) {
    return null;
  }
  return (
    <div className="jp-air-JobLogs-tracking" role="status" title={line}>
      ⚠ {line}
    </div>
  );
}

function InfoRow(props: { model: JobLogsModel }): JSX.Element {
  const info = infoOf(props.model);
  return (
    <div className="jp-air-JobLogs-info">
      <span className="jp-air-JobLogs-count">{info.count}</span>
      <span className="jp-air-JobLogs-note">{info.note}</span>
      <span
        className={
          'jp-air-JobLogs-message' + (info.error ? ' jp-mod-error' : '')
        }
        aria-live="polite"
      >
        {info.message}
      </span>
    </div>
  );
}

/** The chrome above the lines; re-rendered on `model.stateChanged`. */
export class LogsHeader extends ReactWidget {
  /** `downloadUrl`: the URL of every line matching the model's filters. */
  constructor(
    readonly model: JobLogsModel,
    downloadUrl: () => string,
    openJob: (jobId: string) => void = () => undefined
  ) {
    super();
    this._downloadUrl = downloadUrl;
    this._openJob = openJob;
    this.addClass('jp-air-JobLogs-header');
  }

  protected render(): JSX.Element {
    const model = this.model;
    return (
      <UseSignal signal={model.stateChanged}>
        {() => (
          <>
            <TitleRow model={model} />
            <ProgressRow model={model} />
            <FamilyRow model={model} openJob={this._openJob} />
            <Toolbar model={model} downloadUrl={this._downloadUrl} />
            <AttemptRow model={model} />
            <TrackingRow model={model} />
            <InfoRow model={model} />
            <StacksRow model={model} />
          </>
        )}
      </UseSignal>
    );
  }

  private _downloadUrl: () => string;
  private _openJob: (jobId: string) => void;
}
