/**
 * Terminal colours (ANSI SGR escapes) as text segments with JupyterLab's own
 * ANSI classes: py-spy colours its stacks as it would in a terminal.
 */

/** A run of text and the classes of its style (none: plain). */
export interface IAnsiSegment {
  text: string;
  classes: string[];
}

/** The 8 colours in SGR order, as JupyterLab's `ansi-<name>-fg` classes name them. */
const COLOURS = [
  'black',
  'red',
  'green',
  'yellow',
  'blue',
  'magenta',
  'cyan',
  'white'
];

/**
 * An escape sequence: a CSI (`ESC [ params final`), an OSC (`ESC ] ... BEL` or
 * `ESC ] ... ESC \`), a character set's (`ESC ( B`), or any other two-byte
 * escape; a lone ESC at the end too.
 */
const ESCAPE =
  // eslint-disable-next-line no-control-regex
  /\x1b(?:\[([0-?]*)[ -/]*([@-~])|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[ -/]+[0-~]|[@-_]?)/g;

/** The style in force between escapes; colours are 0-15 (8-15 intense), null default. */
interface IStyle {
  fg: number | null;
  bg: number | null;
  bold: boolean;
  dim: boolean;
  italic: boolean;
  underline: boolean;
}

const PLAIN: IStyle = {
  fg: null,
  bg: null,
  bold: false,
  dim: false,
  italic: false,
  underline: false
};

function colourClass(colour: number, layer: 'fg' | 'bg'): string {
  const intense = colour >= 8 ? '-intense' : '';
  return `ansi-${COLOURS[colour % 8]}${intense}-${layer}`;
}

function classesOf(style: IStyle): string[] {
  const classes: string[] = [];
  if (style.fg !== null) {
    classes.push(colourClass(style.fg, 'fg'));
  }
  if (style.bg !== null) {
    classes.push(colourClass(style.bg, 'bg'));
  }
  if (style.bold) {
    classes.push('ansi-bold');
  }
  if (style.underline) {
    classes.push('ansi-underline');
  }
  // JupyterLab has no classes for these two: ours (logs.css).
  if (style.dim) {
    classes.push('jp-air-ansi-dim');
  }
  if (style.italic) {
    classes.push('jp-air-ansi-italic');
  }
  return classes;
}

/**
 * `38;5;N` / `48;5;N` (a 256-colour index: its first 16 have classes) or
 * `38;2;R;G;B` (true colour, left default): the colour, and the codes it used.
 */
function extendedColour(
  codes: number[],
  at: number
): { colour: number | null; used: number } {
  if (codes[at + 1] === 5) {
    const index = codes[at + 2];
    return { colour: index >= 0 && index < 16 ? index : null, used: 3 };
  }
  return { colour: null, used: codes[at + 1] === 2 ? 5 : 2 };
}

/** The style after the SGR parameters `params` (`"33;1"`; empty: reset). */
function applySgr(style: IStyle, params: string): IStyle {
  const codes = params.split(/[;:]/).map(p => (p === '' ? 0 : Number(p)));
  let next = { ...style };
  for (let i = 0; i < codes.length; i++) {
    const code = codes[i];
    if (code === 0) {
      next = { ...PLAIN };
    } else if (code === 1) {
      next.bold = true;
    } else if (code === 2) {
      next.dim = true;
    } else if (code === 3) {
      next.italic = true;
    } else if (code === 4) {
      next.underline = true;
    } else if (code === 22) {
      next.bold = next.dim = false;
    } else if (code === 23) {
      next.italic = false;
    } else if (code === 24) {
      next.underline = false;
    } else if (code >= 30 && code <= 37) {
      next.fg = code - 30;
    } else if (code === 39) {
      next.fg = null;
    } else if (code >= 40 && code <= 47) {
      next.bg = code - 40;
    } else if (code === 49) {
      next.bg = null;
    } else if (code >= 90 && code <= 97) {
      next.fg = code - 90 + 8;
    } else if (code >= 100 && code <= 107) {
      next.bg = code - 100 + 8;
    } else if (code === 38 || code === 48) {
      const { colour, used } = extendedColour(codes, i);
      if (code === 38) {
        next.fg = colour;
      } else {
        next.bg = colour;
      }
      i += used - 1;
    }
    // Any other code (blink, inverse, fonts...) changes nothing shown.
  }
  return next;
}

/**
 * `text` cut at its escapes into runs of one style each; the escapes themselves
 * are dropped (those that are not colours too: cursor moves, titles). The text
 * stays text: a caller adds it as a text node, never as HTML.
 */
export function ansiSegments(text: string): IAnsiSegment[] {
  const segments: IAnsiSegment[] = [];
  let style = PLAIN;
  let from = 0;
  const push = (end: number) => {
    if (end <= from) {
      return;
    }
    const piece = text.slice(from, end);
    const classes = classesOf(style);
    const last = segments[segments.length - 1];
    if (last && last.classes.join(' ') === classes.join(' ')) {
      last.text += piece;
    } else {
      segments.push({ text: piece, classes });
    }
  };
  const escape = new RegExp(ESCAPE.source, 'g');
  let match: RegExpExecArray | null;
  while ((match = escape.exec(text)) !== null) {
    push(match.index);
    from = match.index + match[0].length;
    if (match[2] === 'm') {
      style = applySgr(style, match[1]);
    }
  }
  push(text.length);
  return segments;
}

/** `text` without its escapes: what a copy or a search should see. */
export function stripAnsi(text: string): string {
  return text.replace(ESCAPE, '');
}
