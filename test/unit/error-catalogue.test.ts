/**
 * One error catalogue: every `ERR_…` code the project raises, sends or compares is an entry of
 * src/common/error-codes.ts, and nothing else spells one out. String literals are found with the
 * TypeScript parser (a code named in a comment is prose, not a literal); the addon's C++ and the
 * tests are held to the catalogue too, so a code renamed in one place and not the other fails.
 */
import { execFile } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { ERROR_CATALOGUE, ErrorCodes } from '../../src/common/error-codes.js';
import { REPO } from '../helpers/relay.js';

const CATALOGUE_FILE = 'src/common/error-codes.ts';
const codes = new Set<string>(Object.values(ErrorCodes));

function files(dir: string, ext: string): string[] {
  return readdirSync(join(REPO, dir), { withFileTypes: true, recursive: true })
    .filter((d) => d.isFile() && d.name.endsWith(ext))
    .map((d) => relative(REPO, join(d.parentPath, d.name)))
    .sort();
}

/** Every string literal or template text of a TypeScript file that starts with `ERR_`, with its line. */
function errLiterals(file: string): { code: string; line: number }[] {
  const source = ts.createSourceFile(file, readFileSync(join(REPO, file), 'utf8'), ts.ScriptTarget.Latest, true);
  const found: { code: string; line: number }[] = [];
  const visit = (node: ts.Node): void => {
    // A literal that is a code, or starts with one (`ERR_X: ...` messages spell it out too).
    const code =
      ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node) || ts.isTemplateHead(node) ? /^ERR_[A-Z0-9]+(?:_[A-Z0-9]+)*/.exec(node.text) : null;
    if (code) found.push({ code: code[0], line: source.getLineAndCharacterOfPosition(node.getStart()).line + 1 });
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

function nativeCodes(): { file: string; code: string }[] {
  return files('native', '.cc').flatMap((file) =>
    [...readFileSync(join(REPO, file), 'utf8').matchAll(/"(ERR_[A-Z0-9_]+)"/g)].map((m) => ({ file, code: m[1]! })),
  );
}

describe('the error catalogue', () => {
  it('names each entry after its code, once', () => {
    for (const [name, entry] of Object.entries(ERROR_CATALOGUE)) {
      expect(entry.code).toMatch(/^ERR_[A-Z0-9_]+$/);
      expect(entry.code).toBe(`ERR_${name}`);
      expect(entry.meaning.length).toBeGreaterThan(10);
    }
    expect(codes.size).toBe(Object.keys(ERROR_CATALOGUE).length);
  });

  it('is the only place in src/ and bench/ that spells out a code', () => {
    const stray = [...files('src', '.ts'), ...files('bench', '.ts')]
      .filter((f) => f !== CATALOGUE_FILE)
      .flatMap((file) => errLiterals(file).map(({ code, line }) => `${file}:${line} ${code}`));
    expect(stray).toEqual([]);
  });

  it('holds every code the native addon raises', () => {
    const native = nativeCodes();
    expect(native.length).toBeGreaterThan(10);
    expect(native.filter(({ code }) => !codes.has(code))).toEqual([]);
  });

  it('holds every code the tests expect', () => {
    const unknown = files('test', '.ts').flatMap((file) =>
      errLiterals(file)
        .filter(({ code }) => !codes.has(code))
        .map(({ code, line }) => `${file}:${line} ${code}`),
    );
    expect(unknown).toEqual([]);
  });

  it('has no entry that nothing raises', () => {
    // The Python client raises codes too (error_codes.X); its generated files do not count.
    const python = files(join('python', 'src'), '.py').filter((f) => !f.endsWith('error_codes.py') && !f.endsWith('error_classes.py'));
    const sources = [...files('src', '.ts').filter((f) => f !== CATALOGUE_FILE), ...files('native', '.cc'), ...python]
      .map((f) => readFileSync(join(REPO, f), 'utf8'))
      .join('\n');
    const unused = Object.entries(ERROR_CATALOGUE)
      .filter(([name, e]) => !new RegExp(`ErrorCodes\\.${name}\\b|error_codes\\.${name}\\b|"${e.code}"`).test(sources))
      .map(([, e]) => e.code);
    expect(unused).toEqual([]);
  });

  it('gives the Python client one exception class per code, a TimeoutError for ERR_TIMEOUT', () => {
    // python/src/laminar/error_classes.py, generated below; pytest (test_error_classes.py) checks
    // that every path raising a received error uses it.
    const table = readFileSync(join(REPO, 'python', 'src', 'laminar', 'error_classes.py'), 'utf8');
    const rows = [...table.matchAll(/^ {4}"(ERR_\w+)": (\w+),$/gm)].map(([, code, cls]) => [code, cls]);
    expect(rows).toContainEqual([ErrorCodes.TIMEOUT, 'LaminarTimeoutError']);
    expect(rows.filter(([code]) => !codes.has(code!))).toEqual([]);
    const errors = readFileSync(join(REPO, 'python', 'src', 'laminar', 'errors.py'), 'utf8');
    expect(errors).toMatch(/^class LaminarTimeoutError\(LaminarError, TimeoutError\):/m);
  });

  it('matches what scripts/error-reference.mjs generates: the reference page, the Python catalogue and exception table', async () => {
    await expect(
      promisify(execFile)(process.execPath, [join(REPO, 'scripts', 'error-reference.mjs'), '--check'], { cwd: REPO }).then(() => 'current'),
    ).resolves.toBe('current');
  });
});
