/**
 * The chrome every polling panel shares: the status line, the Refresh
 * button and the pause notice with its Resume button. Each takes the panel's
 * class prefix, so that a panel's parts keep their own names
 * (`jp-air-GpuPanel-status`, ...) beside the shared ones (`jp-air-Status`).
 */

import {
  Button,
  refreshIcon,
  ToolbarButtonComponent
} from '@jupyterlab/ui-components';
import * as React from 'react';

import type { PollingModel } from './model';
import { IStatus, pausedText, StatusKind } from './status';

/**
 * The class of a list panel in the right sidebar (runs, schedules): its
 * frame, colors and scrolling, in labextension/style/sidebar.css.
 */
export const SIDEBAR_PANEL_CLASS = 'jp-air-SidebarPanel';

/** The status line (see `statusOf` for what it says, in which order). */
export function StatusLine(props: {
  status: IStatus;
  prefix: string;
}): JSX.Element {
  const { status, prefix } = props;
  return (
    <div
      className={
        `jp-air-Status ${prefix}-status` +
        (status.kind === StatusKind.Error ? ' jp-mod-error' : '')
      }
      data-kind={status.kind}
      title={status.title}
      aria-live="polite"
    >
      {status.text}
    </div>
  );
}

/** Ask the server now (a refresh also resumes a pause). */
export function RefreshButton(props: {
  model: PollingModel;
  prefix: string;
  tooltip: string;
}): JSX.Element {
  const { model, prefix, tooltip } = props;
  return (
    <ToolbarButtonComponent
      className={`jp-air-Refresh ${prefix}-refresh`}
      icon={refreshIcon}
      tooltip={tooltip}
      onClick={() => {
        model.refresh().catch(error => {
          console.warn('jupyter-air: refresh failed', error);
        });
      }}
    />
  );
}

/** Why polling is paused, and Resume; nothing while it is not paused. */
export function PauseNotice(props: {
  model: PollingModel;
  prefix: string;
}): JSX.Element | null {
  const { model, prefix } = props;
  if (model.paused === null) {
    return null;
  }
  return (
    <div
      className={`jp-air-PauseNotice ${prefix}-paused`}
      role="status"
      data-reason={model.paused}
    >
      <span className="jp-air-PauseNotice-text">{pausedText(model)}</span>
      <Button
        className={`jp-mod-styled jp-mod-accept jp-air-PauseNotice-resume ${prefix}-resume`}
        onClick={() => model.resume()}
      >
        Resume
      </Button>
    </div>
  );
}
