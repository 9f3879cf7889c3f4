import { ansiSegments, stripAnsi } from '../../src/logs/ansi';

/** What py-spy prints for a frame (`CLICOLOR_FORCE=1 py-spy dump`). */
const FRAME = '    \x1b[32mclock_nanosleep\x1b[0m (\x1b[36mlibc.so.6\x1b[0m)';

describe('ansiSegments', () => {
  it("cuts py-spy's frame into its coloured runs, with JupyterLab's classes", () => {
    expect(ansiSegments(FRAME)).toEqual([
      { text: '    ', classes: [] },
      { text: 'clock_nanosleep', classes: ['ansi-green-fg'] },
      { text: ' (', classes: [] },
      { text: 'libc.so.6', classes: ['ansi-cyan-fg'] },
      { text: ')', classes: [] }
    ]);
  });

  it('adds up the codes of one escape and of escapes in a row, until a reset', () => {
    expect(
      ansiSegments('Thread \x1b[33m\x1b[1m6569\x1b[0m (\x1b[2midle\x1b[22m)')
    ).toEqual([
      { text: 'Thread ', classes: [] },
      { text: '6569', classes: ['ansi-yellow-fg', 'ansi-bold'] },
      { text: ' (', classes: [] },
      { text: 'idle', classes: ['jp-air-ansi-dim'] },
      { text: ')', classes: [] }
    ]);
    expect(ansiSegments('\x1b[31;1;4mx\x1b[39my\x1b[mz')).toEqual([
      { text: 'x', classes: ['ansi-red-fg', 'ansi-bold', 'ansi-underline'] },
      { text: 'y', classes: ['ansi-bold', 'ansi-underline'] },
      { text: 'z', classes: [] }
    ]);
  });

  it('maps bright colours, backgrounds and the first 16 of 256 to intense classes', () => {
    expect(ansiSegments('\x1b[92;44ma\x1b[0m')).toEqual([
      { text: 'a', classes: ['ansi-green-intense-fg', 'ansi-blue-bg'] }
    ]);
    expect(
      ansiSegments('\x1b[38;5;9mb\x1b[38;5;200mc\x1b[38;2;1;2;3;4md')
    ).toEqual([
      { text: 'b', classes: ['ansi-red-intense-fg'] },
      { text: 'c', classes: [] },
      { text: 'd', classes: ['ansi-underline'] }
    ]);
  });

  it('drops every other escape: cursor moves, titles, a cut-off one at the end', () => {
    expect(
      ansiSegments('\x1b]0;title\x07a\x1b[2Kb\x1b[1Ac\x1b(Bd\x1b')
    ).toEqual([{ text: 'abcd', classes: [] }]);
    expect(ansiSegments('')).toEqual([]);
  });

  it('keeps markup inside escapes as text, for the caller to add as text', () => {
    const evil = '\x1b[36m<img src=x onerror=alert(1)>\x1b[0m:\x1b[2m1\x1b[0m';
    const segments = ansiSegments(evil);
    expect(segments).toEqual([
      { text: '<img src=x onerror=alert(1)>', classes: ['ansi-cyan-fg'] },
      { text: ':', classes: [] },
      { text: '1', classes: ['jp-air-ansi-dim'] }
    ]);
    // Escapes cannot smuggle a class name: only ours come out.
    const classes = ansiSegments('\x1b[36;"><img src=x>m text').flatMap(
      s => s.classes
    );
    expect(classes.every(c => /^(ansi|jp-air-ansi)-[a-z-]+$/.test(c))).toBe(
      true
    );
  });
});

describe('stripAnsi', () => {
  it("leaves py-spy's text as a terminal without colours shows it", () => {
    expect(stripAnsi(FRAME)).toBe('    clock_nanosleep (libc.so.6)');
    expect(stripAnsi('\x1b[36m<img src=x onerror=alert(1)>\x1b[0m')).toBe(
      '<img src=x onerror=alert(1)>'
    );
  });
});
