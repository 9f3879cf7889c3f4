/**
 * The chrome of the GPU panel (title, node picker, range, refresh, status,
 * pause notice), drawn with React from the model on every state change:
 * a few elements whose text and options follow the model, which React keeps
 * in step more simply than hand-written DOM diffs.
 */

import {
  Button,
  HTMLSelect,
  ReactWidget,
  refreshIcon,
  ToolbarButtonComponent,
  UseSignal
} from '@jupyterlab/ui-components';
import * as React from 'react';

import { formatClock, formatDuration } from './format';
import {
  GpuResourcesModel,
  hostOf,
  isRangeKey,
  nodeKey,
  RANGES
} from './model';

const RANGE_OPTIONS = Object.entries(RANGES).map(([value, { label }]) => ({
  value,
  label
}));

/** The status line: last update, error, or pause, and its tooltip. */
export function statusText(model: GpuResourcesModel): [string, string] {
  const history = model.history;
  let text: string;
  let title = '';
  if (model.paused !== null) {
    text = 'Paused';
    if (history.loaded) {
      title = `Last update ${formatClock(history.now)}`;
    }
  } else if (model.error !== null) {
    text = `Update failed: ${model.error}`;
    title = text;
  } else if (!history.loaded) {
    text = model.busy ? 'Loading…' : 'Waiting for data…';
  } else {
    text = `Updated ${formatClock(history.now)}`;
    title =
      `Polling every ${formatDuration(model.settings.pollInterval)}; ` +
      `server samples every ${formatDuration(history.interval)}`;
  }
  const notice = model.notice;
  if (notice !== null && model.error === null) {
    text = `${notice} · ${text}`;
    title = title ? `${notice}\n${title}` : notice;
  }
  return [text, title];
}

/** Why the panel is paused, in words. */
export function pausedText(model: GpuResourcesModel): string {
  return model.paused === 'idle'
    ? `Paused after ${formatDuration(model.settings.idleTimeout)} ` +
        'without activity. Reopen the panel or click Resume to continue.'
    : 'Paused while this browser tab is hidden.';
}

/** The name of this server in the node picker and the heading. */
function here(model: GpuResourcesModel): string {
  const host = model.localHost;
  return host ? `This server (${host})` : 'This server';
}

function Header(props: { model: GpuResourcesModel }): JSX.Element {
  const { model } = props;
  const source = model.source;
  const showNodes = model.nodes.length > 0 || source !== null;
  const heading = source
    ? `Node ${source.node} (${hostOf(source)}) of job ${source.job}`
    : here(model);
  const [status, statusTitle] = statusText(model);
  const nodeOptions = [
    { value: '', label: here(model) },
    ...model.nodes.map(n => ({
      value: nodeKey(n),
      label: `job ${n.job} · node ${n.node} (${hostOf(n)})`
    }))
  ];
  return (
    <>
      <div className="jp-air-GpuPanel-header">
        <h2 className="jp-air-GpuPanel-title">GPU resources</h2>
        <label className="jp-air-GpuPanel-nodeRow" hidden={!showNodes}>
          <span className="jp-air-GpuPanel-nodeLabel">Node</span>
          <HTMLSelect
            className="jp-air-GpuPanel-node"
            title="Whose GPUs to show: this server or a node of a job"
            options={nodeOptions}
            value={nodeKey(source)}
            onChange={event => model.select(event.target.value)}
          />
        </label>
        <div className="jp-air-GpuPanel-toolbar">
          <HTMLSelect
            className="jp-air-GpuPanel-range"
            title="Time range of the charts"
            aria-label="Time range"
            options={RANGE_OPTIONS}
            value={model.range}
            onChange={event => {
              if (isRangeKey(event.target.value)) {
                model.range = event.target.value;
              }
            }}
          />
          <ToolbarButtonComponent
            className="jp-air-GpuPanel-refresh"
            icon={refreshIcon}
            tooltip={
              // A job node samples on its own: refresh fetches its latest sample.
              source === null
                ? 'Take a sample now'
                : "Fetch the node's latest sample"
            }
            onClick={() => {
              model.refresh().catch(error => {
                console.warn('jupyter-air: GPU refresh failed', error);
              });
            }}
          />
        </div>
        <div
          className={
            'jp-air-GpuPanel-status' +
            (model.error !== null ? ' jp-mod-error' : '')
          }
          title={statusTitle}
          aria-live="polite"
        >
          {status}
        </div>
      </div>
      {model.paused !== null && (
        <div
          className="jp-air-GpuPanel-paused"
          role="status"
          data-reason={model.paused}
        >
          <span className="jp-air-GpuPanel-pausedText">
            {pausedText(model)}
          </span>
          <Button
            className="jp-mod-styled jp-mod-accept jp-air-GpuPanel-resume"
            onClick={() => model.resume()}
          >
            Resume
          </Button>
        </div>
      )}
      {showNodes && (
        <div className="jp-air-GpuPanel-source" title={heading}>
          {heading}
        </div>
      )}
    </>
  );
}

/** The chrome above the cards; re-rendered on `model.stateChanged`. */
export class GpuHeader extends ReactWidget {
  constructor(readonly model: GpuResourcesModel) {
    super();
    this.addClass('jp-air-GpuPanel-chrome');
  }

  protected render(): JSX.Element {
    return (
      <UseSignal signal={this.model.stateChanged}>
        {() => <Header model={this.model} />}
      </UseSignal>
    );
  }
}
