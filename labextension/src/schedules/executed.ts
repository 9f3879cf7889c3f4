/**
 * The executed notebooks of notebook tasks, as a read-only drive of
 * JupyterLab's contents: `AirExecuted:<job id>/<name>.ipynb` opens in the
 * notebook editor like any notebook, outputs and all, with no kernel and no
 * way to change it.
 *
 * The copy lives in the task's job's private folder, outside the server's
 * root, so the drive reads it through `GET jupyter-air/jobs/<id>/notebook`,
 * which checks the caller's level on the job (CAN_VIEW, as for its logs).
 * Nothing here imports the notebook packages: the document manager opens the
 * path with the notebook factory it already has.
 */

import type { Contents, ServerConnection } from '@jupyterlab/services';
import { Signal } from '@lumino/signaling';

import type { Requester } from '../common/api';

/** The drive's name: the prefix of its paths. */
export const EXECUTED_DRIVE = 'AirExecuted';

/** What `GET jupyter-air/jobs/<id>/notebook` answers. */
export interface IExecutedNotebook {
  job_id: string;
  /** The attempt of the task's job that ran it. */
  attempt: number;
  /** The notebook's file name, e.g. `report.ipynb`. */
  name: string;
  /** Where it lies on the server's machine (the schedule owner's AIR_HOME). */
  path: string;
  /** Unix seconds. */
  modified: number;
  notebook: { cells?: { metadata?: Record<string, unknown> }[] };
}

/** The drive path of a job's executed notebook, for the document manager. */
export function executedPath(jobId: string, name: string): string {
  return `${EXECUTED_DRIVE}:${jobId}/${name}`;
}

/** The job id of a drive-local path (`<job id>/<name>`), or null. */
export function jobOfPath(localPath: string): string | null {
  const parts = localPath.split('/').filter(Boolean);
  return parts.length === 2 && parts[1].endsWith('.ipynb') ? parts[0] : null;
}

/**
 * The notebook as the editor must show it: every cell neither editable nor
 * deletable, so that the view cannot be taken for the schedule's notebook.
 */
export function readOnlyNotebook(
  notebook: IExecutedNotebook['notebook']
): IExecutedNotebook['notebook'] {
  return {
    ...notebook,
    cells: (notebook.cells ?? []).map(cell => ({
      ...cell,
      metadata: { ...cell.metadata, editable: false, deletable: false }
    }))
  };
}

const READ_ONLY =
  "A scheduled run's executed notebook is read-only: open the schedule's " +
  'notebook to change what the next runs do';

export class ExecutedNotebooksDrive implements Contents.IDrive {
  constructor(
    private readonly request: Requester,
    readonly serverSettings: ServerConnection.ISettings
  ) {}

  readonly name = EXECUTED_DRIVE;
  readonly fileChanged = new Signal<this, Contents.IChangedArgs>(this);

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    this._disposed = true;
    Signal.clearData(this);
  }

  async get(localPath: string): Promise<Contents.IModel> {
    const jobId = jobOfPath(localPath);
    if (jobId === null) {
      return directory(localPath);
    }
    const found = await this.request<IExecutedNotebook>(
      `jobs/${encodeURIComponent(jobId)}/notebook`
    );
    const modified = new Date(found.modified * 1000).toISOString();
    return {
      name: localPath.split('/').pop() ?? found.name,
      path: localPath,
      type: 'notebook',
      format: 'json',
      mimetype: 'application/x-ipynb+json',
      writable: false,
      created: modified,
      last_modified: modified,
      content: readOnlyNotebook(found.notebook)
    };
  }

  async getDownloadUrl(): Promise<string> {
    throw new Error(READ_ONLY);
  }

  async newUntitled(): Promise<Contents.IModel> {
    throw new Error(READ_ONLY);
  }

  async delete(): Promise<void> {
    throw new Error(READ_ONLY);
  }

  async rename(): Promise<Contents.IModel> {
    throw new Error(READ_ONLY);
  }

  async save(): Promise<Contents.IModel> {
    throw new Error(READ_ONLY);
  }

  async copy(): Promise<Contents.IModel> {
    throw new Error(READ_ONLY);
  }

  async createCheckpoint(): Promise<Contents.ICheckpointModel> {
    throw new Error(READ_ONLY);
  }

  async listCheckpoints(): Promise<Contents.ICheckpointModel[]> {
    return [];
  }

  async restoreCheckpoint(): Promise<void> {
    throw new Error(READ_ONLY);
  }

  async deleteCheckpoint(): Promise<void> {
    throw new Error(READ_ONLY);
  }

  private _disposed = false;
}

/** A folder of the drive: nothing is listed, each notebook is opened by path. */
function directory(localPath: string): Contents.IModel {
  const epoch = new Date(0).toISOString();
  return {
    name: localPath.split('/').pop() ?? '',
    path: localPath,
    type: 'directory',
    format: 'json',
    mimetype: '',
    writable: false,
    created: epoch,
    last_modified: epoch,
    content: []
  };
}
