/** The start/stop/restart/kill surface shared by the embedded servers. */
import { ServiceError } from './errors.js';
import { removeTempDir, type ManagedProcess } from './managed-process.js';
import { ErrorCodes } from '../common/error-codes.js';

export interface EmbeddedServer {
  readonly url: string;
  readonly port: number;
  /** The directory holding the server's data (JetStream store, AOF). */
  readonly dataDir: string;
  /**
   * The server's own temp directory (its config, and its data unless placed elsewhere): what
   * stop() removes, and what someone cleaning up after a killed owner must remove.
   */
  readonly rootDir: string;
  /** Stops the server (clean shutdown) and removes its temp dir. Final. */
  stop(): Promise<void>;
  /** Stops (SIGTERM, or SIGKILL with `{ kill: true }`) and starts again on the same port and data. */
  restart(options?: { kill?: boolean }): Promise<void>;
  /** SIGKILL, as in a crash; restart() brings it back. */
  kill(): Promise<void>;
  readonly pid: number | undefined;
  /** The last few KiB the server printed, for diagnostics. */
  logTail(): string;
  [Symbol.asyncDispose](): Promise<void>;
}

/** Wraps a ManagedProcess into the start/stop/restart/kill surface shared by both servers. */
export function embeddedServer(
  proc: ManagedProcess,
  fields: { url: string; port: number; dataDir: string; ownsDir: boolean; rootDir: string },
): EmbeddedServer {
  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    await proc.terminate('SIGTERM');
    if (fields.ownsDir) removeTempDir(fields.rootDir);
  };
  return {
    url: fields.url,
    port: fields.port,
    dataDir: fields.dataDir,
    rootDir: fields.rootDir,
    get pid() {
      return proc.pid;
    },
    stop,
    async restart(options = {}) {
      if (stopped) throw new ServiceError(ErrorCodes.SERVICE_STOPPED, 'the server was stopped with stop(); start a new one');
      await proc.terminate(options.kill ? 'SIGKILL' : 'SIGTERM');
      await proc.start();
    },
    async kill() {
      await proc.terminate('SIGKILL');
    },
    logTail: () => proc.logTail(),
    [Symbol.asyncDispose]: stop,
  };
}
