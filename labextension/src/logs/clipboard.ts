/**
 * Copy text to the system clipboard.
 */

import { lineAsText, plural } from './format';
import type { ILogLine } from './types';

/**
 * `navigator.clipboard` where the page may use it, else a hidden textarea and
 * `execCommand('copy')` (older browsers, insecure origins, denied permission).
 * Call it from a user gesture. Resolves to whether the text was copied.
 */
export async function copyText(text: string): Promise<boolean> {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // Fall back below.
    }
  }
  const area = document.createElement('textarea');
  area.value = text;
  area.setAttribute('readonly', '');
  area.style.position = 'fixed';
  area.style.top = '0';
  area.style.left = '-9999px';
  area.style.opacity = '0';
  const active = document.activeElement as HTMLElement | null;
  document.body.appendChild(area);
  try {
    area.select();
    return document.execCommand('copy');
  } catch {
    return false;
  } finally {
    area.remove();
    active?.focus?.();
  }
}

/** Copy `lines` as text; resolves to whether they were copied, and what to say. */
export async function copyLines(
  lines: readonly ILogLine[]
): Promise<[boolean, string]> {
  if (!lines.length) {
    return [false, 'Nothing to copy'];
  }
  return (await copyText(lines.map(lineAsText).join('\n')))
    ? [true, `Copied ${plural(lines.length, 'line')}`]
    : [false, 'Could not copy to the clipboard'];
}
