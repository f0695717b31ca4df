/**
 * Option precedence for every daemon: command-line flag > environment variable > config file
 * (JSON, `--config`) > default. Commander resolves flags and environment; this fills in the
 * config file underneath them.
 */
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { InvalidInputError, ErrorCodes } from '../common/errors.js';

export function applyConfigFile(command: Command): void {
  const path = command.getOptionValue('config') as string | undefined;
  if (!path) return;
  let config: unknown;
  try {
    config = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `cannot read config file ${path}: ${(err as Error).message}`);
  }
  if (typeof config !== 'object' || config === null || Array.isArray(config)) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `config file ${path} must hold a JSON object`);
  }
  const known = new Map(command.options.map((o) => [o.attributeName(), o]));
  for (const [key, value] of Object.entries(config)) {
    if (!known.has(key)) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `config file ${path}: unknown option ${JSON.stringify(key)}`);
    const source = command.getOptionValueSource(key);
    if (source === undefined || source === 'default') command.setOptionValueWithSource(key, value, 'config');
  }
}
