/**
 * The "Schedule this notebook" form, at the top of the Schedules view: cron,
 * time zone, ranks and experiment, the cron's words and next fire times
 * before anything is saved, and what a scheduled notebook gets.
 */

import { Button, ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import * as React from 'react';

import { MAX_RANKS, ScheduleForm } from './form';
import { formatFireTime } from './format';
import type { INotebookScheduleFields, ISchedule } from './types';

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
      <Field label="Ranks" name="nproc_per_node">
        <input
          className="jp-mod-styled"
          type="number"
          min={1}
          max={MAX_RANKS}
          step={1}
          value={Number.isFinite(f.nproc_per_node) ? f.nproc_per_node : ''}
          title="Each run defines nproc_per_node with it: write %%air_distributed -n {nproc_per_node} in the notebook"
          onChange={event =>
            form.set('nproc_per_node', event.target.valueAsNumber)
          }
        />
      </Field>
      <Field label="Experiment" name="experiment">
        <input
          {...text('experiment')}
          placeholder="default: /Users/<you>/<name>"
        />
      </Field>
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
