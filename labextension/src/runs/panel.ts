/**
 * The runs panel: header, table and comparison of one `RunsModel`; polls
 * while shown.
 */

import { Panel } from '@lumino/widgets';

import { activateWhileShown } from '../common/activation';
import { CompareView } from './compare';
import { RunsHeader } from './header';
import { RunsModel } from './model';
import { IRunActions, RunsTable } from './table';

export class RunsPanel extends Panel {
  constructor(options: { model: RunsModel; actions: IRunActions }) {
    super();
    this.model = options.model;
    this.id = 'jupyter-air-runs';
    this.addClass('jp-air-RunsPanel');
    this.addWidget(new RunsHeader(this.model));
    this.addWidget(new RunsTable(this.model, options.actions));
    this.addWidget(new CompareView(this.model));
    activateWhileShown(this, this.model);
  }

  /** The state shown; the panel disposes of it with itself. */
  readonly model: RunsModel;

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    // The children first: they disconnect from the model they show.
    super.dispose();
    this.model.dispose();
  }
}
