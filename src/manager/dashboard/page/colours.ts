/**
 * The page's colours, shared by the chain, the grid and the charts, so that a version's age reads
 * the same everywhere: newest dark green, one behind light green, then yellow, orange, red.
 */

/** By version age (newest announced minus the version): 0, 1, 2, 3, 4 or more. */
export const AGE_COLOURS = ['#1a7f37', '#7cc47f', '#e3c300', '#f08c00', '#d1242f'] as const;
/** No version loaded yet, or nothing to compare with. */
export const NONE_COLOUR = '#9aa0a6';
export const DEAD_COLOUR = '#24292f';
export const SUSPECT_COLOUR = '#d1242f';
export const BUSY_COLOUR = '#0969da';

/** The colour of a version `age` behind the newest (negative or null: none). */
export function ageColour(age: number | null): string {
  if (age === null || age < 0) return NONE_COLOUR;
  return AGE_COLOURS[Math.min(age, AGE_COLOURS.length - 1)]!;
}

/** A sequential blue ramp for a share from 0 to 1 (KV use, trajectories in flight). */
export function rampColour(share: number): string {
  const s = Math.min(1, Math.max(0, share));
  // From a pale blue to a deep one, in HSL so that the steps look even.
  const light = Math.round(88 - s * 58);
  return `hsl(212, 80%, ${light}%)`;
}

/** By engine state: idle, loading, generating, reinitialising (indices of ROLLOUT_STATES). */
export const STATE_COLOURS = ['#9aa0a6', '#0969da', '#1a7f37', '#8250df'] as const;

/** Line colours of the charts, in the order series are drawn. */
export const LINE_COLOURS = ['#0969da', '#1a7f37', '#bf3989', '#f08c00', '#8250df', '#d1242f', '#57606a'] as const;
