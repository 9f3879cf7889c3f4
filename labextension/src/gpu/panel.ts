/**
 * The "GPU resources" side panel: the chrome (React) above the cards.
 */

import type { Message } from '@lumino/messaging';
import { Panel } from '@lumino/widgets';

import { activateWhileShown } from '../common/activation';
import { GpuBody } from './body';
import { GpuHeader } from './header';
import { GpuResourcesModel } from './model';
import { GpuUsageView } from './usageView';

/**
 * Live per-GPU utilization, memory, temperature and power, the processes on
 * each GPU, and the host CPU and memory of `model`. The model polls while
 * the panel is shown. Above the cards, the GPU-hours of the last day or week.
 */
export class GpuPanel extends Panel {
  constructor(options: GpuPanel.IOptions) {
    super();
    this.id = 'jupyter-air-gpu';
    this.addClass('jp-air-GpuPanel');
    this.title.caption = 'GPU resources';
    this.model = options.model;
    this._body = new GpuBody(this.model);
    this.addWidget(new GpuHeader(this.model));
    this.addWidget(new GpuUsageView(this.model.request));
    this.addWidget(this._body);
    this.model.stateChanged.connect(this._onState, this);
    activateWhileShown(this, this.model);
  }

  readonly model: GpuResourcesModel;

  /** Read the chart theme again from the CSS variables and redraw. */
  refreshTheme(): void {
    this._body.refreshTheme();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.dispose();
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    // Start loading plotly while the first answer is on its way.
    void this._body.loadCharts();
  }

  private _onState(): void {
    this.toggleClass('jp-mod-paused', this.model.paused !== null);
  }

  private _body: GpuBody;
}

export namespace GpuPanel {
  export interface IOptions {
    model: GpuResourcesModel;
  }
}
