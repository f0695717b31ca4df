/**
 * The soak's audit of the experience buffer against a real nats-server: it knows every record
 * written (also across a server restart), reports a trajectory written twice, and counts the
 * messages deleted before it could read them rather than vouching for them.
 */
import { describe, expect, it } from 'vitest';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { headers } from '@nats-io/transport-node';
import { ExperienceWriter, bufferNames } from '../../src/data/index.js';
import { META_HEADER } from '../../src/data/codec/record-meta.js';
import { BufferAudit } from '../../src/soak/audit.js';
import { natsFixture, trajectory } from '../data/helpers.js';

const nats = natsFixture();

describe('BufferAudit', () => {
  it('sees every record, a record written twice, and counts what was deleted before it read it', async () => {
    const names = bufferNames();
    const w = await ExperienceWriter.open({ nc: nats.nc });
    for (const id of ['a', 'b', 'c']) await w.write(trajectory({ id }));
    // 'b' is deleted before the audit starts (the trainer deletes what it trains on).
    const jsm = await jetstreamManager(nats.nc);
    const b = await jsm.streams.getMessage(names.stream, { last_by_subj: names.recordSubject('b') });
    await jsm.streams.deleteMessage(names.stream, b!.seq);
    // A second record of 'c' past the writer's de-duplication: what the audit exists to catch.
    const c = await jsm.streams.getMessage(names.stream, { last_by_subj: names.recordSubject('c') });
    // (Its headers without the Nats-Msg-Id, which the server would de-duplicate on.)
    const again = headers();
    again.set(META_HEADER, c!.header.get(META_HEADER));
    await jetstream(nats.nc).publish(names.recordSubject('c'), c!.data, { headers: again });

    const audit = await BufferAudit.open(nats.nc);
    try {
      expect(await audit.caughtUp(30_000)).toBe(true);
      expect(audit.has('a')).toBe(true);
      expect(audit.has('b')).toBe(false);
      expect(audit.has('c')).toBe(true);
      const seqOfC = c!.seq;
      const books = audit.books();
      expect(books).toMatchObject({ records: 2, duplicated: ['c'], redelivered: 0, unread: 1 });
      // The duplicate is described by its two records: the first at c's sequence, the second after it.
      expect(books.duplicateRecords).toHaveLength(1);
      expect(books.duplicateRecords[0]!.id).toBe('c');
      expect(books.duplicateRecords[0]!.records.map((r) => r.seq)).toEqual([seqOfC, seqOfC + 1]);
      for (const r of books.duplicateRecords[0]!.records) expect(Number.isNaN(Date.parse(r.storedAt))).toBe(false);

      // It goes on across a nats-server restart, from the next sequence.
      await nats.server.restart({ kill: true });
      await w.write(trajectory({ id: 'd' }));
      expect(await audit.caughtUp(60_000)).toBe(true);
      expect(audit.has('d')).toBe(true);
      expect(audit.books()).toMatchObject({ records: 3, duplicated: ['c'], redelivered: 0, unread: 1 });
    } finally {
      await audit.stop();
    }
  }, 120_000);
});
