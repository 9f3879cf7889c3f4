import type { ServerConnection } from '@jupyterlab/services';

import { APIError } from '../../src/common/api';
import {
  ExecutedNotebooksDrive,
  executedPath,
  jobOfPath,
  readOnlyNotebook
} from '../../src/schedules/executed';
import type { IExecutedNotebook } from '../../src/schedules/executed';

const JOB = '20261206-041912-a1b2c3';

const ANSWER: IExecutedNotebook = {
  job_id: JOB,
  attempt: 1,
  name: 'report.ipynb',
  path: `/home/ada/.local/share/jupyter/air/jobs/${JOB}/attempt-1/notebook/report.ipynb`,
  modified: 1765000000,
  notebook: {
    cells: [{ metadata: { tags: ['injected-parameters'] } }, {}]
  }
};

function drive(
  answer: (endPoint: string) => unknown
): [ExecutedNotebooksDrive, string[]] {
  const asked: string[] = [];
  const request = async <T>(endPoint: string): Promise<T> => {
    asked.push(endPoint);
    return answer(endPoint) as T;
  };
  return [
    new ExecutedNotebooksDrive(request, {} as ServerConnection.ISettings),
    asked
  ];
}

describe('the executed notebooks drive', () => {
  it('names a job and its notebook by path', () => {
    expect(executedPath(JOB, 'report.ipynb')).toBe(
      `AirExecuted:${JOB}/report.ipynb`
    );
    expect(jobOfPath(`${JOB}/report.ipynb`)).toBe(JOB);
    expect(jobOfPath(JOB)).toBeNull();
    expect(jobOfPath('')).toBeNull();
    expect(jobOfPath(`${JOB}/notes.txt`)).toBeNull();
  });

  it('gives the job route a notebook, read-only down to each cell', async () => {
    const [executed, asked] = drive(() => ANSWER);
    const model = await executed.get(`${JOB}/report.ipynb`);
    expect(asked).toEqual([`jobs/${JOB}/notebook`]);
    expect(model.type).toBe('notebook');
    expect(model.writable).toBe(false);
    expect(model.name).toBe('report.ipynb');
    expect(model.last_modified).toBe(new Date(1765000000 * 1000).toISOString());
    expect(model.content.cells.map((c: any) => c.metadata)).toEqual([
      { tags: ['injected-parameters'], editable: false, deletable: false },
      { editable: false, deletable: false }
    ]);
  });

  it('passes a refusal on, and changes nothing', async () => {
    const [executed] = drive(() => {
      throw new APIError("You don't have CAN_VIEW on job", 'forbidden', 403);
    });
    await expect(executed.get(`${JOB}/report.ipynb`)).rejects.toThrow(
      'CAN_VIEW'
    );
    await expect(executed.save()).rejects.toThrow('read-only');
    await expect(executed.delete()).rejects.toThrow('read-only');
    await expect(executed.rename()).rejects.toThrow('read-only');
    expect(await executed.listCheckpoints()).toEqual([]);
  });

  it('keeps the notebook itself as it was', () => {
    const notebook = { cells: [{ metadata: { editable: true } }] };
    readOnlyNotebook(notebook);
    expect(notebook.cells[0].metadata).toEqual({ editable: true });
  });
});
