/**
 * Maps a segment the relay named. The relay hands out a path it holds open, so a missing file
 * means this process does not see the relay's file system as the relay does: typically the
 * relay's huge-page tmpfs at <shm-dir>/huge, which lives in the relay's mount namespace (a
 * container of its own, `ip netns exec`). Said plainly rather than as a bare ENOENT.
 */
import { ErrorCodes, LaminarError } from '../../common/errors.js';
import { Mapping, type MappingOptions } from '../../native/index.js';

export function mapSegment(path: string, options: MappingOptions): Mapping {
  try {
    return new Mapping(path, options);
  } catch (err) {
    if ((err as LaminarError).code !== 'ENOENT') throw err;
    throw new LaminarError(
      ErrorCodes.SEGMENT_NOT_VISIBLE,
      `the relay's segment ${path} does not exist for this process: it runs in another mount namespace than the relay (a separate container, ip netns exec) ` +
        "and does not see the relay's file system there. Run both where the same mounts are visible, give the relay a --shm-dir that is a tmpfs mounted for both " +
        '(mount -t tmpfs -o huge=within_size tmpfs <dir>), or start the relay with --huge-pages off',
      { cause: err },
    );
  }
}
