/**
 * A refused job permission, as the logs view shows it: who to ask, for what.
 */

import { el } from '../dom';
import { APIError } from '../common/api';
import type { IAccessDenied } from './types';

/** The facts of a job-permission 403, or null for any other error. */
export function accessDenied(error: unknown): IAccessDenied | null {
  if (!(error instanceof APIError) || error.status !== 403) {
    return null;
  }
  const { job, needed, owner } = error.details;
  if (
    typeof job !== 'string' ||
    typeof needed !== 'string' ||
    typeof owner !== 'string'
  ) {
    return null; // e.g. a deployment's Authorizer refusing: its message is shown
  }
  return { job, needed, owner };
}

/** "You don't have access to these logs", with the job, the permission and its owner. */
export function renderAccessDenied(denied: IAccessDenied): HTMLElement {
  const node = el('div', 'jp-air-JobLogs-denied');
  node.dataset.job = denied.job;
  node.dataset.needed = denied.needed;
  node.dataset.owner = denied.owner;
  node.appendChild(
    el(
      'div',
      'jp-air-JobLogs-deniedTitle',
      "You don't have access to these logs"
    )
  );
  const text = el('div', 'jp-air-JobLogs-deniedText');
  text.append(
    'Viewing the logs of job ',
    el('code', '', denied.job),
    ' needs ',
    el('code', '', denied.needed),
    '. Its owner, ',
    el('strong', '', denied.owner),
    ', can grant it.'
  );
  node.appendChild(text);
  return node;
}
