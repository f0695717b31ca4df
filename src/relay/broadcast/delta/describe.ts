/**
 * A relay's delta broadcast in words, one line: `laminar versions` (the relay's own status) and
 * `laminar status` (the manager's view, from the relay's heartbeat) say it the same way, e.g.
 * "delta auto: sent 12.0 MiB for 1.0 GiB (1.2 %: same 250, sparse 6, full 0); received 1.0 GiB
 * for 1.0 GiB (100.0 %: same 0, sparse 0, full 256)"; a relay in the middle adds how many chunks it
 * forwarded as it received them ("..., full 0, 6 forwarded as received"). Pure, over the shapes of
 * protocol/status.ts.
 */
import { formatBytes } from '../../../common/units.js';
import type { DeltaCounts, DeltaStatus } from '../../protocol/status.js';

/** "12.0 MiB for 1.0 GiB (1.2 %: same 250, sparse 6, full 0)", or "nothing" before the first chunk. */
export function describeDeltaCounts(counts: DeltaCounts): string {
  const { same, sparse, full } = counts.chunks;
  if (same + sparse + full === 0) return 'nothing';
  const share = counts.fullBytes > 0 ? ` (${((100 * counts.wireBytes) / counts.fullBytes).toFixed(1)} %` : ' (';
  const forwarded = counts.forwarded ? `, ${counts.forwarded} forwarded as received` : '';
  return `${formatBytes(counts.wireBytes)} for ${formatBytes(counts.fullBytes)}${share}: same ${same}, sparse ${sparse}, full ${full}${forwarded})`;
}

export function describeDelta(delta: DeltaStatus): string {
  return `delta ${delta.mode}: sent ${describeDeltaCounts(delta.out)}; received ${describeDeltaCounts(delta.in)}`;
}
