/** The output cap: a tool's output beyond `maxBytes` (UTF-8) is cut and ends with a marker. */

export const DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024;

/** The marker that ends a cut output; `n` is the number of bytes cut. */
export function truncationMarker(n: number): string {
  return `\n[... ${n} bytes truncated]`;
}

/** `text` within `maxBytes` bytes of UTF-8 (marker included), and whether it was cut. */
export function capOutput(text: string, maxBytes: number): { output: string; truncated: boolean } {
  // Most outputs are short: a UTF-16 unit is at most 3 bytes of UTF-8, so no need to count them,
  // nor to copy them to count.
  if (text.length * 3 <= maxBytes || Buffer.byteLength(text, 'utf8') <= maxBytes) return { output: text, truncated: false };
  const bytes = Buffer.from(text, 'utf8');
  const marker = truncationMarker(bytes.length);
  const keep = Math.max(0, maxBytes - Buffer.byteLength(marker));
  // Decoding a cut in the middle of a character yields U+FFFD: drop that partial character.
  const head = bytes
    .subarray(0, keep)
    .toString('utf8')
    .replace(/\uFFFD$/, '');
  return { output: head + truncationMarker(bytes.length - Buffer.byteLength(head)), truncated: true };
}
