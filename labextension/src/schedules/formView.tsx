/**
 * The "Schedule this notebook" form, at the top of the Schedules view: cron,
 * time zone, ranks and experiment, the cron's words and next fire times
 * before anything is saved, and what a scheduled notebook gets; "Add a task"
 * makes it a graph of tasks (notebooks and commands, each after the tasks it
 * waits for).
 */

import { Button, ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import * as React from 'react';

import { MAX_RANKS, ScheduleForm } from './form';
import { formatFireTime } from './format';
import type { INotebookScheduleFields, ISchedule, RunIf } from './types';

const RUN_IF: { value: RunIf; label: string }[] = [
  { value: 'ALL_SUCCESS', label: 'all succeeded' },
  { value: 'NONE_FAILED', label: 'none failed' },
  { value: 'ALL_DONE', label: 'all ended, however' }
];

/** A number of ranks, 1 to MAX_RANKS (the model says what is wrong with others). */
function RanksInput(props: {
  value: number;
  onChange: (ranks: number) => void;
  title: string;
  label?: string;
  className?: string;
}): JSX.Element {
  return (
    <input
      className={`jp-mod-styled ${props.className ?? ''}`}
      aria-label={props.label}
      title={props.title}
      type="number"
      min={1}
      max={MAX_RANKS}
      step={1}
      value={Number.isFinite(props.value) ? props.value : ''}
      onChange={event => props.onChange(event.target.valueAsNumber)}
    />
  );
}

/** One task of the form's graph: what it runs, its ranks, what it waits for. */
function TaskRow(props: { form: ScheduleForm; index: number }): JSX.Element {
  const { form, index } = props;
  const task = form.tasks[index];
  const others = form.tasks.filter((_, i) => i !== index);
  const label = `Task ${index + 1}`;
  return (
    <fieldset className="jp-air-ScheduleForm-task" aria-label={label}>
      <div className="jp-air-ScheduleForm-taskLine">
        <input
          className="jp-mod-styled jp-air-ScheduleForm-taskKey"
          aria-label={`${label} key`}
          title="The task's key: letters, digits, _ and -"
          value={task.key}
          onChange={event => form.setTask(index, { key: event.target.value })}
        />
        <select
          className="jp-mod-styled"
          aria-label={`${label} kind`}
          value={task.kind}
          onChange={event =>
            form.setTask(index, {
              kind: event.target.value as 'notebook' | 'command'
            })
          }
        >
          <option value="notebook">notebook</option>
          <option value="command">command</option>
        </select>
        <label className="jp-air-ScheduleForm-taskRanksLabel">
          ranks
          <RanksInput
            className="jp-air-ScheduleForm-taskRanks"
            label={`${label} ranks`}
            title="Ranks (nproc_per_node)"
            value={task.ranks}
            onChange={ranks => form.setTask(index, { ranks })}
          />
        </label>
        <Button
          className="jp-mod-styled jp-mod-minimal jp-air-ScheduleForm-taskRemove"
          aria-label={`Remove ${label.toLowerCase()}`}
          title="Remove this task"
          disabled={form.tasks.length < 2}
          onClick={() => form.removeTask(index)}
        >
          ×
        </Button>
      </div>
      <input
        className="jp-mod-styled jp-air-ScheduleForm-taskTarget"
        aria-label={`${label} ${task.kind === 'notebook' ? 'notebook' : 'command'}`}
        placeholder={
          task.kind === 'notebook'
            ? 'folder/other.ipynb (from the server root)'
            : 'python prep.py --day today'
        }
        value={task.target}
        onChange={event => form.setTask(index, { target: event.target.value })}
      />
      {others.length > 0 && (
        <div className="jp-air-ScheduleForm-after">
          <span>after</span>
          {others.map(other => (
            <label key={other.key}>
              <input
                type="checkbox"
                checked={task.dependsOn.includes(other.key)}
                onChange={event =>
                  form.setWaitsFor(index, other.key, event.target.checked)
                }
              />
              {other.key}
            </label>
          ))}
          {task.dependsOn.length > 0 && (
            <select
              className="jp-mod-styled"
              aria-label={`${label} runs if`}
              title="When it runs once those ended (else it is skipped)"
              value={task.runIf}
              onChange={event =>
                form.setTask(index, { runIf: event.target.value as RunIf })
              }
            >
              {RUN_IF.map(r => (
                <option key={r.value} value={r.value}>
                  if {r.label}
                </option>
              ))}
            </select>
          )}
        </div>
      )}
    </fieldset>
  );
}

/** The task graph, or the buttons that start one. */
function Tasks(props: { form: ScheduleForm }): JSX.Element {
  const { form } = props;
  return (
    <div className="jp-air-ScheduleForm-tasks" aria-label="Tasks">
      <div className="jp-air-ScheduleForm-tasksHead">
        <span className="jp-air-ScheduleForm-label">Tasks</span>
        {form.tasks.length === 0 && <span>this notebook only</span>}
      </div>
      {form.tasks.map((_, index) => (
        <TaskRow key={index} form={form} index={index} />
      ))}
      <div className="jp-air-ScheduleForm-addTask">
        <Button
          className="jp-mod-styled"
          onClick={() => form.addTask('notebook')}
        >
          + Notebook task
        </Button>
        <Button
          className="jp-mod-styled"
          onClick={() => form.addTask('command')}
        >
          + Command task
        </Button>
      </div>
    </div>
  );
}

/** Said in the form and in `%air_schedule?`: a schedule runs code, not a kernel. */
export const SNAPSHOT_NOTE =
  'The schedule runs a copy of the notebook as it is saved now, top to bottom in a fresh ' +
  "kernel: its code, not this kernel's variables. Save the notebook first; later edits " +
  'need the schedule updated.';

/** The IANA names the browser knows, for the time zone field's suggestions. */
function timeZones(): string[] {
  const intl = Intl as unknown as {
    supportedValuesOf?: (key: string) => string[];
  };
  try {
    return intl.supportedValuesOf?.('timeZone') ?? [];
  } catch {
    return [];
  }
}

function Field(props: {
  label: string;
  name: keyof INotebookScheduleFields;
  children: React.ReactNode;
}): JSX.Element {
  return (
    <label
      className={`jp-air-ScheduleForm-field jp-air-ScheduleForm-${props.name}`}
    >
      <span className="jp-air-ScheduleForm-label">{props.label}</span>
      {props.children}
    </label>
  );
}

function Form(props: {
  form: ScheduleForm;
  onSaved: (schedule: ISchedule) => void;
  onCancel: () => void;
}): JSX.Element {
  const { form } = props;
  const f = form.fields;
  const text = (name: 'name' | 'cron' | 'timezone' | 'experiment') => ({
    className: 'jp-mod-styled',
    value: f[name],
    onChange: (event: React.ChangeEvent<HTMLInputElement>) =>
      form.set(name, event.target.value)
  });
  const save = async () => {
    const made = await form.save();
    if (made) {
      props.onSaved(made);
    }
  };
  const problem = form.problem;
  return (
    <form
      className="jp-air-ScheduleForm"
      aria-label="Schedule this notebook"
      onSubmit={event => {
        event.preventDefault();
        void save();
      }}
    >
      <h3 className="jp-air-ScheduleForm-title">Schedule {f.notebook}</h3>
      <Field label="Name" name="name">
        <input {...text('name')} required maxLength={100} />
      </Field>
      <Field label="Cron" name="cron">
        <input
          {...text('cron')}
          required
          placeholder="0 2 * * *  or  0/5 * * * * ?"
          title="5 fields (minute hour day month weekday), or Quartz's 6-7 with seconds first"
        />
      </Field>
      <Field label="Time zone" name="timezone">
        <input {...text('timezone')} list="jp-air-ScheduleForm-zones" />
      </Field>
      <datalist id="jp-air-ScheduleForm-zones">
        {timeZones().map(zone => (
          <option key={zone} value={zone} />
        ))}
      </datalist>
      {form.tasks.length === 0 && (
        <Field label="Ranks" name="nproc_per_node">
          <RanksInput
            title="Each run defines nproc_per_node with it: write %%air_distributed -n {nproc_per_node} in the notebook"
            value={f.nproc_per_node}
            onChange={ranks => form.set('nproc_per_node', ranks)}
          />
        </Field>
      )}
      <Field label="Experiment" name="experiment">
        <input
          {...text('experiment')}
          placeholder="default: /Users/<you>/<name>"
        />
      </Field>
      <Tasks form={form} />
      <div className="jp-air-ScheduleForm-preview" aria-live="polite">
        {form.previewError !== null ? (
          <span className="jp-mod-error">{form.previewError}</span>
        ) : form.preview === null ? (
          'Reading the cron…'
        ) : (
          <>
            <div className="jp-air-ScheduleForm-words">
              {form.preview.words}
            </div>
            <ol
              className="jp-air-ScheduleForm-times"
              aria-label="Next fire times"
            >
              {form.preview.next_fire_times.map(time => (
                <li key={time}>{formatFireTime(time)}</li>
              ))}
            </ol>
          </>
        )}
      </div>
      <p className="jp-air-ScheduleForm-note">{SNAPSHOT_NOTE}</p>
      {form.saveError !== null && (
        <div className="jp-air-ScheduleForm-error jp-mod-error" role="alert">
          {form.saveError}
        </div>
      )}
      <div className="jp-air-ScheduleForm-buttons">
        <Button
          className="jp-mod-styled jp-mod-reject"
          onClick={props.onCancel}
        >
          Cancel
        </Button>
        <Button
          type="submit"
          className="jp-mod-styled jp-mod-accept jp-air-ScheduleForm-save"
          disabled={problem !== null || form.saving || form.preview === null}
          title={problem ?? 'Save the schedule'}
        >
          {form.saving ? 'Saving…' : 'Save schedule'}
        </Button>
      </div>
    </form>
  );
}

/** The form's place in the view; empty (hidden) while no form is open. */
export class ScheduleFormView extends ReactWidget {
  constructor(private readonly _onSaved: (schedule: ISchedule) => void) {
    super();
    this.addClass('jp-air-ScheduleForm-wrap');
    this.hide();
  }

  get form(): ScheduleForm | null {
    return this._form;
  }

  /** Show `form` (closing any other). */
  open(form: ScheduleForm): void {
    this._form?.dispose();
    this._form = form;
    this.show();
    this.update();
  }

  close(): void {
    this._form?.dispose();
    this._form = null;
    this.hide();
    this.update();
  }

  dispose(): void {
    this._form?.dispose();
    super.dispose();
  }

  protected render(): JSX.Element | null {
    const form = this._form;
    if (!form) {
      return null;
    }
    return (
      <UseSignal signal={form.changed}>
        {() => (
          <Form
            form={form}
            onCancel={() => this.close()}
            onSaved={schedule => {
              this.close();
              this._onSaved(schedule);
            }}
          />
        )}
      </UseSignal>
    );
  }

  private _form: ScheduleForm | null = null;
}
