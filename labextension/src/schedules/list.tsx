/**
 * The schedules, one card each: the cron in words, the next fire times, the
 * task graph, the last runs with each task's job logs and MLflow run, and
 * the buttons the caller's level allows. Drawn with React from the model on
 * every state change (a user has a few dozen schedules at most).
 */

import { Button, ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import * as React from 'react';

import { formatFireTime, relativeTime, sweepLine, taskStages } from './format';
import { allows, ScheduleAction, SchedulesModel } from './model';
import type { IChildJob, ISchedule, IScheduleRun, ITaskRun } from './types';

/** What a card's links and buttons need of the shell; the plugin gives them. */
export interface IScheduleActions {
  openLogs(jobId: string): void;
  /** Open a notebook task's executed notebook (read-only), of schedule run `runId`. */
  openExecuted(jobId: string, path: string, runId: number): void;
  /** Ask the user before a schedule is deleted. */
  confirmDelete(name: string): Promise<boolean>;
}

const BUTTONS: { action: ScheduleAction; label: string; title: string }[] = [
  { action: 'pause', label: 'Pause', title: 'Stop firing until resumed' },
  { action: 'resume', label: 'Resume', title: 'Fire again from the next time' },
  {
    action: 'run-now',
    label: 'Run now',
    title: 'Start a run at once, outside the cron'
  },
  { action: 'delete', label: 'Delete', title: 'Delete the schedule' }
];

function TaskGraph(props: { schedule: ISchedule }): JSX.Element {
  const stages = taskStages(props.schedule.tasks);
  return (
    <ol className="jp-air-Schedules-graph" aria-label="Tasks">
      {stages.map((stage, index) => (
        <li key={index} className="jp-air-Schedules-stage">
          {stage.map(task => (
            <span
              key={task.task_key}
              className="jp-air-Schedules-task"
              data-task-key={task.task_key}
              title={
                (task.notebook ?? task.command ?? '') +
                (task.sweep ? ` (sweep: ${sweepLine(task.sweep)})` : '') +
                (task.depends_on.length
                  ? ` after ${task.depends_on.join(', ')} (${task.run_if})`
                  : '')
              }
            >
              {task.task_key}
              {task.kind === 'notebook' && task.notebook
                ? ` (${task.notebook.split('/').pop()})`
                : ''}
              {task.sweep ? ' (sweep)' : ''}
            </span>
          ))}
        </li>
      ))}
    </ol>
  );
}

function TaskRun(props: {
  task: ITaskRun;
  runId: number;
  actions: IScheduleActions;
}): JSX.Element {
  const { task, runId, actions } = props;
  return (
    <li
      className="jp-air-Schedules-taskRun"
      data-task-key={task.task_key}
      data-status={task.status}
      title={task.message ?? undefined}
    >
      <span className="jp-air-Schedules-taskKey">{task.task_key}</span>{' '}
      <span
        className={`jp-air-Schedules-status jp-mod-${task.status.toLowerCase()}`}
      >
        {task.status.toLowerCase()}
      </span>
      {task.job_id && (
        <button
          type="button"
          className="jp-air-Schedules-link jp-air-Schedules-logs"
          data-job-id={task.job_id}
          title={`Open the logs of job ${task.job_id}`}
          onClick={() => actions.openLogs(task.job_id!)}
        >
          logs
        </button>
      )}
      {task.sweep_id && (
        <span
          className="jp-air-Schedules-sweep"
          data-sweep-id={task.sweep_id}
          title={`Its trials: air sweep get ${task.sweep_id}, or the runs panel`}
        >
          sweep {task.sweep_id}
        </span>
      )}
      {task.job_id && task.executed_notebook && (
        <button
          type="button"
          className="jp-air-Schedules-link jp-air-Schedules-output"
          title={`Open the executed notebook, outputs and all (read-only): ${task.executed_notebook}`}
          onClick={() =>
            actions.openExecuted(task.job_id!, task.executed_notebook!, runId)
          }
        >
          output
        </button>
      )}
      {task.run_url && (
        <a
          className="jp-air-Schedules-link jp-air-Schedules-mlflow"
          href={task.run_url}
          target="_blank"
          rel="noopener"
          title={
            task.sweep_id
              ? "Open the sweep's run in MLflow: its best trial, each trial's run under it"
              : "Open the task's run in MLflow"
          }
        >
          MLflow
        </a>
      )}
      {task.children.length > 0 && (
        <ul className="jp-air-Schedules-children">
          {task.children.map(child => (
            <ChildJob key={child.job_id} child={child} actions={actions} />
          ))}
        </ul>
      )}
    </li>
  );
}

/** A job the task's job started: a notebook task's distributed cell. */
function ChildJob(props: {
  child: IChildJob;
  actions: IScheduleActions;
}): JSX.Element {
  const { child, actions } = props;
  return (
    <li
      className="jp-air-Schedules-child"
      data-job-id={child.job_id}
      data-status={child.status}
    >
      <span className="jp-air-Schedules-childName">
        {child.run_name ?? child.job_id}
      </span>{' '}
      <span
        className={`jp-air-Schedules-status jp-mod-${child.status.toLowerCase()}`}
      >
        {child.status.toLowerCase()}
      </span>
      <button
        type="button"
        className="jp-air-Schedules-link jp-air-Schedules-logs"
        title={`Open the logs of job ${child.job_id}, which the task started`}
        onClick={() => actions.openLogs(child.job_id)}
      >
        logs
      </button>
      {child.run_url && (
        <a
          className="jp-air-Schedules-link jp-air-Schedules-mlflow"
          href={child.run_url}
          target="_blank"
          rel="noopener"
          title="Open this job's run in MLflow"
        >
          MLflow
        </a>
      )}
    </li>
  );
}

function Run(props: {
  run: IScheduleRun;
  schedule: ISchedule;
  model: SchedulesModel;
  actions: IScheduleActions;
}): JSX.Element {
  const { run, schedule, model, actions } = props;
  const repairable =
    (run.status === 'FAILED' || run.status === 'CANCELLED') &&
    allows(schedule, 'run-now');
  return (
    <li
      className="jp-air-Schedules-run"
      data-run-id={run.id}
      data-status={run.status}
    >
      <div className="jp-air-Schedules-runHead">
        <span
          className={`jp-air-Schedules-status jp-mod-${run.status.toLowerCase()}`}
        >
          {run.status.toLowerCase()}
        </span>{' '}
        <span title={run.scheduled_time}>
          {formatFireTime(run.scheduled_time)}
        </span>
        {run.trigger === 'RUN_NOW' && ' (run now)'}
        {run.message && (
          <span className="jp-air-Schedules-message"> · {run.message}</span>
        )}
        {repairable && (
          <button
            type="button"
            className="jp-air-Schedules-link jp-air-Schedules-repair"
            title="Re-run the failed tasks, and those after them, in this run"
            disabled={model.isPending(schedule.id)}
            onClick={() => void model.repair(schedule.id, run.id)}
          >
            repair
          </button>
        )}
      </div>
      {run.tasks.length > 0 && (
        <ul className="jp-air-Schedules-taskRuns">
          {run.tasks.map(task => (
            <TaskRun
              key={task.task_key}
              task={task}
              runId={run.id}
              actions={actions}
            />
          ))}
        </ul>
      )}
    </li>
  );
}

function Card(props: {
  schedule: ISchedule;
  model: SchedulesModel;
  actions: IScheduleActions;
}): JSX.Element {
  const { schedule, model, actions } = props;
  const paused = schedule.pause_status === 'PAUSED';
  const next = schedule.next_fire_times[0];
  const shown = BUTTONS.filter(
    b =>
      allows(schedule, b.action) &&
      !(b.action === 'pause' && paused) &&
      !(b.action === 'resume' && !paused)
  );
  const act = async (action: ScheduleAction) => {
    if (action === 'delete' && !(await actions.confirmDelete(schedule.name))) {
      return;
    }
    await model.act(schedule.id, action);
  };
  return (
    <section
      className="jp-air-Schedules-card"
      data-schedule-id={schedule.id}
      data-schedule-name={schedule.name}
      data-pause-status={schedule.pause_status}
    >
      <h3 className="jp-air-Schedules-name">
        {schedule.name}
        {paused && <span className="jp-air-Schedules-paused">paused</span>}
      </h3>
      <div className="jp-air-Schedules-cron" title={schedule.cron.expression}>
        {schedule.cron.words}
      </div>
      <div className="jp-air-Schedules-next">
        {paused
          ? 'Paused: nothing fires until it is resumed.'
          : next
            ? `Next: ${formatFireTime(next)} (${relativeTime(next)})`
            : 'No fire time ahead.'}
      </div>
      <div className="jp-air-Schedules-owner">
        Owner: {schedule.owner} · your permission:{' '}
        {schedule.level.replace(/_/g, ' ').toLowerCase()}
      </div>
      <TaskGraph schedule={schedule} />
      {shown.length > 0 && (
        <div className="jp-air-Schedules-buttons">
          {shown.map(b => (
            <Button
              key={b.action}
              className={`jp-mod-styled jp-air-Schedules-${b.action}`}
              title={b.title}
              disabled={model.isPending(schedule.id)}
              onClick={() => void act(b.action)}
            >
              {b.label}
            </Button>
          ))}
        </div>
      )}
      {schedule.last_runs.length > 0 ? (
        <ul className="jp-air-Schedules-runs" aria-label="Last runs">
          {schedule.last_runs.map(run => (
            <Run
              key={run.id}
              run={run}
              schedule={schedule}
              model={model}
              actions={actions}
            />
          ))}
        </ul>
      ) : (
        <div className="jp-air-Schedules-noRuns">No runs yet.</div>
      )}
    </section>
  );
}

/** The list of schedules; re-rendered on `model.stateChanged`. */
export class SchedulesList extends ReactWidget {
  constructor(
    readonly model: SchedulesModel,
    private readonly _actions: IScheduleActions
  ) {
    super();
    this.addClass('jp-air-Schedules-list');
  }

  protected render(): JSX.Element {
    return (
      <UseSignal signal={this.model.stateChanged}>
        {() => (
          <>
            {(this.model.schedules ?? []).map(schedule => (
              <Card
                key={schedule.id}
                schedule={schedule}
                model={this.model}
                actions={this._actions}
              />
            ))}
          </>
        )}
      </UseSignal>
    );
  }
}
