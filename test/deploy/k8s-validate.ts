/**
 * tools/k8s-validate for the tests: built with Go into a scratch directory (from Go's cache: the
 * bootstrap did the first, slow build), and run over manifests.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { REPO } from '../helpers/relay.js';

export const MANIFESTS = join(REPO, 'docs/deploy/kubernetes');
const TOOL = join(REPO, 'tools/k8s-validate');
/** Made outside the manifests (kubectl create secret: never committed). */
const EXTERNAL = ['--secret', 'laminar-job-secret'];
/** Bounds a cold build (modules downloaded, k8s.io/api compiled) where the bootstrap has not run. */
export const BUILD_TIMEOUT_MS = 590_000;

export interface Container {
  file: string;
  object: string;
  name: string;
  image: string;
  command: string[] | null;
  args: string[] | null;
  env: string[];
  envFrom: string[];
}
export interface Summary {
  objects: string[];
  containers: Container[];
  configMaps: Record<string, string[]>;
  configMapData: Record<string, Record<string, string>>;
}

/** `go` on PATH, else where the official archive installs it. */
function findGo(): string | null {
  for (const go of [process.env.GO, 'go', '/usr/local/go/bin/go']) {
    if (go && spawnSync(go, ['version']).status === 0) return go;
  }
  return null;
}

/** Builds the tool into `dir`; answers its path. */
export function buildValidator(dir: string): string {
  const go = findGo();
  if (!go) throw new Error('Go is not installed (go on PATH or /usr/local/go/bin/go): tools/k8s-validate cannot be built; install Go 1.26 or later');
  const binary = join(dir, 'k8s-validate');
  const build = spawnSync(go, ['build', '-o', binary, '.'], { cwd: TOOL, encoding: 'utf8', timeout: BUILD_TIMEOUT_MS });
  if (build.status !== 0) throw new Error(`go build in tools/k8s-validate failed:\n${build.stderr}`);
  return binary;
}

export function validate(binary: string, files: string[]): { status: number | null; stdout: string; stderr: string } {
  return spawnSync(binary, [...EXTERNAL, ...files], { encoding: 'utf8', timeout: 30_000 });
}
