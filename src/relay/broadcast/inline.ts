/**
 * Which payloads of the peer protocol travel inline with their message (UCX eager) instead of
 * waiting at the sender until the receiver pulls them (rendezvous).
 *
 * A full chunk goes by rendezvous: the receiver pulls it straight into its segment, one pull per
 * link at a time (incoming.ts's PullLane), and no byte lands anywhere else. An offer's header
 * (a few KiB to a few hundred) and a sparse delta (a few percent of its chunk: ~330 KB of 16 MiB
 * when 2 % of the bf16 words changed) land in a buffer anyway: pulled by rendezvous, each costs a
 * round trip that takes a turn of the receiver's event loop (to ask) and of the sender's worker
 * (to answer), and a delta waits behind the link's other pulls. On a loaded host each such turn
 * measured tens to hundreds of milliseconds, far more than the bytes take on the wire (one relay
 * of a delta broadcast took 225 ms to pull an offer's header from a busy predecessor). Sent
 * inline, the payload is there with its message: the receiver accepts the offer, or rebuilds the
 * chunk (and sends the same payload on to a successor holding the same base), at once.
 *
 * Bounded, so that an inline payload is always one the receiver copies (its UCX worker drops an
 * inline payload past `maxEagerBytes`, 16 MiB by default) and one whose early arrival costs
 * little memory: a larger one (a chunk that changed nearly everywhere, the header of a model of
 * very many tensors) goes by rendezvous. Inline payloads arrive at the link's rate, as pulled
 * ones do: a window of chunks in flight, each pulled as soon as it is announced.
 */
export const INLINE_PAYLOAD_MAX_BYTES = 1024 * 1024;

/** Whether a header or delta payload of `bytes` bytes is sent inline with its message. */
export function sendsInline(bytes: number): boolean {
  return bytes <= INLINE_PAYLOAD_MAX_BYTES;
}
