/**
 * The chrome of the GPU panel (title, node picker, range, refresh, status,
 * pause notice), drawn with React from the model on every state change:
 * a few elements whose text and options follow the model, which React keeps
 * in step more simply than hand-written DOM diffs.
 */

import { HTMLSelect, ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import * as React from 'react';

import { PauseNotice, RefreshButton, StatusLine } from '../common/chrome';
import { IStatus, statusOf } from '../common/status';
import { formatClock, formatDuration } from '../common/time';
import {
  GpuResourcesModel,
  hostOf,
  isRangeKey,
  nodeKey,
  RANGES
} from './model';

const PREFIX = 'jp-air-GpuPanel';

const RANGE_OPTIONS = Object.entries(RANGES).map(([value, { label }]) => ({
  value,
  label
}));

/** The status line: an error, a pause, or the time of the last sample. */
export function statusText(model: GpuResourcesModel): IStatus {
  return statusOf(
    model,
    () => {
      const history = model.history;
      if (!history.loaded) {
        return {
          text: model.busy ? 'Loading…' : 'Waiting for data…',
          title: ''
        };
      }
      return {
        text: `Updated ${formatClock(history.now * 1000)}`,
        title:
          `Polling every ${formatDuration(model.settings.pollInterval)}; ` +
          `server samples every ${formatDuration(history.interval)}`
      };
    },
    model.notice
  );
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
          <RefreshButton
            model={model}
            prefix={PREFIX}
            tooltip={
              // A job node samples on its own: refresh fetches its latest sample.
              source === null
                ? 'Take a sample now'
                : "Fetch the node's latest sample"
            }
          />
        </div>
        <StatusLine status={statusText(model)} prefix={PREFIX} />
      </div>
      <PauseNotice model={model} prefix={PREFIX} />
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
