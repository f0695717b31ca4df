/**
 * The shm directory's lock: a pid file, so that two relays never manage the same segments. Its
 * own file because the daemon takes it before the store exists (and releases it after the store
 * closed); it is about processes, not versions.
 */
import { mkdir, readFile, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ConflictError } from '../../common/errors.js';
import { processRunning } from '../../common/process.js';
import { ErrorCodes } from '../../common/error-codes.js';

/** A pid file in the shm directory, so that two relays never manage the same segments. */
export async function lockDirectory(dir: string): Promise<() => Promise<void>> {
  await mkdir(dir, { recursive: true, mode: 0o750 });
  const file = join(dir, 'relay.pid');
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      await writeFile(file, String(process.pid), { flag: 'wx', mode: 0o640 });
      return async () => {
        await unlink(file).catch(() => undefined);
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const pid = Number((await readFile(file, 'utf8').catch(() => '')).trim());
      if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && processRunning(pid)) {
        throw new ConflictError(ErrorCodes.SHM_DIR_IN_USE, `relay pid ${pid} already manages ${dir}`);
      }
      await unlink(file).catch(() => undefined); // stale: its relay is gone
    }
  }
  throw new ConflictError(ErrorCodes.SHM_DIR_IN_USE, `could not lock ${dir}`);
}
