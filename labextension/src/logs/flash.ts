/**
 * A short-lived message (e.g. "Copied 12 lines") that clears itself.
 */

/** Milliseconds a message stays. */
const FLASH_MS = 3000;

export class Flash {
  /** `changed` is called when the message is shown and when it clears. */
  constructor(private readonly _changed: () => void) {}

  /** The message shown, or null. */
  get text(): string | null {
    return this._text;
  }

  /** Show `text` for a few seconds (replacing any message shown). */
  show(text: string): void {
    clearTimeout(this._timer);
    this._text = text;
    this._changed();
    this._timer = setTimeout(() => {
      this._text = null;
      this._changed();
    }, FLASH_MS);
  }

  dispose(): void {
    clearTimeout(this._timer);
  }

  private _text: string | null = null;
  private _timer: ReturnType<typeof setTimeout> | undefined;
}
