/**
 * JSON logs with pino. Every daemon creates one root logger at its entry point and hands
 * children (`logger.child({ component })`) to its parts; libraries take a logger as an option.
 */
import { pino, type Logger, type LevelWithSilent } from 'pino';

export type { Logger };

export interface LoggerOptions {
  level?: LevelWithSilent;
  name?: string;
  /** Where to write; defaults to stderr so that stdout stays free for command output. */
  destination?: number | string;
}

export function createLogger(options: LoggerOptions = {}): Logger {
  const level = options.level ?? (process.env.LAMINAR_LOG_LEVEL as LevelWithSilent | undefined) ?? 'info';
  return pino({ level, name: options.name ?? 'laminar', base: { pid: process.pid } }, pino.destination({ dest: options.destination ?? 2, sync: true }));
}

/** A logger that drops everything (library default when the caller passes none). */
export const silentLogger: Logger = pino({ level: 'silent' });
