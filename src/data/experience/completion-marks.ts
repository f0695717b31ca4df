/**
 * Completion marks: the knowledge that a trajectory was written must outlive its record.
 *
 * A consuming trainer removes each record it trains on, and the sampler removes evicted ones. A
 * rollout killed between writing a record and purging the trajectory's partial log leaves that
 * log behind; whoever picks the log up later (a failover, a repack, the manager returning its
 * sample to the prompt pool, a restarted rollout) asks the buffer whether the trajectory was
 * completed, and with the record gone the answer was "no": the sample was generated and
 * written a second time. So the sampler marks every trajectory completed, on a subject of its
 * own in a second stream, before it removes the record, and `ExperienceWriter.has` reads the
 * record, then the mark (in that order: the mark exists before the record goes).
 *
 * Marks expire after the completion horizon (the stream's max_age, stream.ts): one empty
 * message per trajectory for that long, instead of one forever. A mark is read from the stream's
 * leader (leader-read.ts): a lagging replica does not have the newest marks.
 */
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { mapLimit } from '../../common/concurrency.js';
import { readFromLeader } from '../leader-read.js';
import type { BufferNames } from './stream.js';

const MARKS_IN_FLIGHT = 64;

export class CompletionMarks {
  constructor(
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly names: BufferNames,
  ) {}

  /** Marks trajectories completed; resolves once the server stored every mark, throws otherwise. */
  async mark(ids: readonly string[]): Promise<void> {
    await mapLimit(ids, MARKS_IN_FLIGHT, (id) => this.js.publish(this.names.doneSubject(id), undefined, { msgID: id }));
  }

  /** Whether a trajectory's record left the buffer within the horizon. */
  async has(id: string): Promise<boolean> {
    return (await readFromLeader(this.jsm, this.names.doneStream, { last_by_subj: this.names.doneSubject(id) })) !== null;
  }
}
