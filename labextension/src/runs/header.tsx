/**
 * The chrome of the runs panel (store and experiment pickers, search,
 * status filter, refresh, pager, status line), drawn with React from the
 * model on every state change.
 */

import {
  Button,
  HTMLSelect,
  ReactWidget,
  UseSignal
} from '@jupyterlab/ui-components';
import * as React from 'react';

import { PauseNotice, RefreshButton, StatusLine } from '../common/chrome';
import { IStatus, statusOf } from '../common/status';
import { storeLabel } from './format';
import { RunsModel } from './model';
import { RunStatus, STATUSES } from './types';

const PREFIX = 'jp-air-RunsPanel';

const STATUS_OPTIONS = [
  { value: '', label: 'All statuses' },
  ...STATUSES.map(s => ({ value: s, label: s.toLowerCase() }))
];

/** The status line: an error, a pause, or what the panel shows. */
export function statusText(model: RunsModel): IStatus {
  return statusOf(model, () => {
    let text: string;
    if (model.notebookPath === null) {
      text = 'Open a notebook to see the runs of its experiment.';
    } else if (!model.resolved || (model.page === null && model.experimentId)) {
      text = 'Loading…';
    } else if (!model.experimentId) {
      text = model.storePicked
        ? model.experiments.length
          ? 'Pick an experiment of this store.'
          : 'This store has no experiment you may view.'
        : 'No runs yet: this notebook has no MLflow experiment.';
    } else {
      const count = model.page?.runs.length ?? 0;
      // A sweep's runs are one row: say how many of the rows are sweeps.
      const sweeps = model.rows.filter(row => row.kind === 'sweep').length;
      text = [
        `${count} run${count === 1 ? '' : 's'}`,
        ...(sweeps ? [`${sweeps} sweep${sweeps === 1 ? '' : 's'}`] : []),
        `page ${model.pageNumber}`
      ].join(' · ');
    }
    return { text, title: '' };
  });
}

function Search(props: { model: RunsModel }): JSX.Element {
  const [text, setText] = React.useState(props.model.search);
  return (
    <input
      className="jp-air-RunsPanel-search jp-mod-styled"
      type="search"
      placeholder="Search runs"
      title="A run's name, or an MLflow filter such as params.lr = '0.1' (Enter to search)"
      aria-label="Search runs"
      value={text}
      onChange={event => setText(event.target.value)}
      onKeyDown={event => {
        if (event.key === 'Enter') {
          props.model.setSearch(text.trim());
        }
      }}
      onBlur={() => props.model.setSearch(text.trim())}
    />
  );
}

function Header(props: { model: RunsModel }): JSX.Element {
  const { model } = props;
  const experiments = model.experiments.map(e => ({
    value: e.id,
    label: e.name
  }));
  if (model.experimentId === null && experiments.length > 0) {
    experiments.unshift({ value: '', label: 'Pick an experiment' });
  }
  const stores = model.stores.map(s => ({
    value: s.store,
    label: storeLabel(s)
  }));
  const shown = model.stores.find(s => s.store === model.store);
  return (
    <div className="jp-air-RunsPanel-header">
      <h2 className="jp-air-RunsPanel-title">Experiment runs</h2>
      {stores.length > 1 && (
        <HTMLSelect
          className="jp-air-RunsPanel-store"
          title={`The MLflow store whose runs are shown: ${shown?.tracking_uri ?? 'none yet'}`}
          aria-label="Tracking store"
          options={
            model.store === null || !shown
              ? [{ value: '', label: 'Pick a store' }, ...stores]
              : stores
          }
          value={shown ? shown.store : ''}
          onChange={event => model.setStore(event.target.value)}
        />
      )}
      {experiments.length > 0 && (
        <HTMLSelect
          className="jp-air-RunsPanel-experiment"
          title="The experiment whose runs are shown"
          aria-label="Experiment"
          options={experiments}
          value={model.experimentId ?? ''}
          onChange={event => model.setExperiment(event.target.value)}
        />
      )}
      {(model.page?.tracking ?? []).map(line => (
        <div
          key={line}
          className="jp-air-RunsPanel-tracking"
          role="status"
          title={line}
        >
          ⚠ {line}
        </div>
      ))}
      <div className="jp-air-RunsPanel-toolbar">
        <Search model={model} />
        {/* One piece: in a narrow sidebar both wrap below the search box. */}
        <div className="jp-air-RunsPanel-filters">
          <HTMLSelect
            className="jp-air-RunsPanel-statusFilter"
            aria-label="Status"
            options={STATUS_OPTIONS}
            value={model.status ?? ''}
            onChange={event =>
              model.setStatus((event.target.value || null) as RunStatus | null)
            }
          />
          <RefreshButton
            model={model}
            prefix={PREFIX}
            tooltip="Refresh the runs"
          />
        </div>
      </div>
      <StatusLine status={statusText(model)} prefix={PREFIX} />
      <PauseNotice model={model} prefix={PREFIX} />
      {(model.pageNumber > 1 || model.hasNextPage) && (
        <div className="jp-air-RunsPanel-pager">
          <Button
            className="jp-mod-styled jp-air-RunsPanel-previous"
            disabled={model.pageNumber <= 1}
            onClick={() => model.previousPage()}
          >
            Newer
          </Button>
          <Button
            className="jp-mod-styled jp-air-RunsPanel-next"
            disabled={!model.hasNextPage}
            onClick={() => model.nextPage()}
          >
            Older
          </Button>
        </div>
      )}
    </div>
  );
}

/** The chrome above the table; re-rendered on `model.stateChanged`. */
export class RunsHeader extends ReactWidget {
  constructor(readonly model: RunsModel) {
    super();
    this.addClass('jp-air-RunsPanel-chrome');
  }

  protected render(): JSX.Element {
    return (
      <UseSignal signal={this.model.stateChanged}>
        {() => <Header model={this.model} />}
      </UseSignal>
    );
  }
}
