/**
 * The documentation holds together: README.md stays short, every relative link in README.md,
 * CONTRIBUTING.md and docs/ reaches a file (and a heading, for `file.md#anchor`), code examples
 * import from the package's public entry points, and docs/reference/cli.md is what the CLI's
 * `--help` says today (scripts/cli-reference.mjs --check).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const README_LIMIT = 25_600;

function markdownFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...markdownFiles(path));
    else if (entry.name.endsWith('.md')) out.push(path);
  }
  return out;
}

const FILES = [join(REPO, 'README.md'), join(REPO, 'CONTRIBUTING.md'), ...markdownFiles(join(REPO, 'docs'))].filter((f) => existsSync(f));

/** The file's text with fenced code blocks blanked (line numbers kept). */
function withoutFences(text: string): string {
  let fence: string | undefined;
  return text
    .split('\n')
    .map((line) => {
      const m = /^\s*(`{3,}|~{3,})/.exec(line);
      if (fence === undefined && m) {
        fence = m[1]!.slice(0, 3);
        return '';
      }
      if (fence !== undefined) {
        if (line.trim().startsWith(fence)) fence = undefined;
        return '';
      }
      return line;
    })
    .join('\n');
}

/** GitHub's heading anchors (github-slugger): lower case, punctuation but `-` and `_` dropped, spaces to `-`, repeats numbered. */
function anchorsOf(text: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const line of withoutFences(text).split('\n')) {
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const plain = m[1]!
      .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
      .replace(/<[^>]+>/g, '')
      .replace(/[`*]/g, '');
    const base = plain
      .toLowerCase()
      .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

interface Link {
  file: string;
  line: number;
  target: string;
}

function linksOf(file: string): Link[] {
  const links: Link[] = [];
  withoutFences(readFileSync(file, 'utf8'))
    .split('\n')
    .forEach((raw, i) => {
      const line = raw.replace(/`[^`]*`/g, '');
      for (const m of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
        links.push({ file, line: i + 1, target: m[1]! });
      }
    });
  return links;
}

describe('documentation', () => {
  it('README.md is at most 25 KB', () => {
    const size = statSync(join(REPO, 'README.md')).size;
    expect(size, `README.md is ${size} bytes; move detail to docs/`).toBeLessThanOrEqual(README_LIMIT);
  });

  it('has the files the README promises', () => {
    for (const f of ['README.md', 'CONTRIBUTING.md', 'docs/README.md', 'docs/reference/cli.md', 'docs/performance/journal.md']) {
      expect(existsSync(join(REPO, f)), f).toBe(true);
    }
  });

  it('every relative link reaches a file, and every #anchor a heading', () => {
    const broken: string[] = [];
    const anchorCache = new Map<string, Set<string>>();
    const anchors = (path: string): Set<string> => {
      let a = anchorCache.get(path);
      if (!a) anchorCache.set(path, (a = anchorsOf(readFileSync(path, 'utf8'))));
      return a;
    };
    for (const file of FILES) {
      for (const link of linksOf(file)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(link.target)) continue; // http:, https:, mailto:
        const where = `${relative(REPO, link.file)}:${link.line} -> ${link.target}`;
        const hash = link.target.indexOf('#');
        const pathPart = decodeURIComponent(hash < 0 ? link.target : link.target.slice(0, hash)).replace(/\?.*$/, '');
        const anchor = hash < 0 ? undefined : decodeURIComponent(link.target.slice(hash + 1));
        const target = pathPart === '' ? link.file : resolve(dirname(link.file), pathPart);
        if (!existsSync(target)) {
          broken.push(`${where}: no such file`);
          continue;
        }
        if (anchor !== undefined && anchor !== '' && target.endsWith('.md') && !anchors(target).has(anchor)) {
          broken.push(`${where}: no heading with that anchor in ${relative(REPO, target)}`);
        }
      }
    }
    expect(broken).toEqual([]);
  });

  it('code examples import from the public entry points, not from dist/ or src/', () => {
    const deep: string[] = [];
    for (const file of FILES) {
      readFileSync(file, 'utf8')
        .split('\n')
        .forEach((line, i) => {
          if (/\bfrom\s+['"](?:laminar\/dist\/|\.{1,2}\/(?:\.\.\/)*(?:src|dist)\/)/.test(line)) deep.push(`${relative(REPO, file)}:${i + 1}: ${line.trim()}`);
        });
    }
    expect(deep).toEqual([]);
  });

  it('docs/reference/cli.md matches the CLI (scripts/cli-reference.mjs --check)', () => {
    const r = spawnSync(process.execPath, [join(REPO, 'scripts/cli-reference.mjs'), '--check'], { cwd: REPO, encoding: 'utf8' });
    expect(r.status, `${r.stdout}${r.stderr}`).toBe(0);
  });
});
