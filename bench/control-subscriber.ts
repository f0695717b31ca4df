/**
 * The raw limit of `npm run bench -- control`: a process that only receives the heartbeat
 * subject and decodes each message (what any subscriber must do), nothing else. The bench reads
 * its CPU from /proc and asks it, over IPC, how many messages it has seen.
 *
 * Run by the bench with `fork(file, [natsUrl, subject])`.
 */
import { connect } from '@nats-io/transport-node';
import { unpack } from 'msgpackr';

async function main(): Promise<void> {
  const [url, subject] = process.argv.slice(2);
  if (!url || !subject || !process.send) throw new Error('usage: fork(control-subscriber.js, [natsUrl, subject])');
  const nc = await connect({ servers: url, name: 'bench raw heartbeat subscriber' });
  let received = 0;
  let fields = 0;
  nc.subscribe(subject, {
    callback: (err, msg) => {
      if (err) return;
      // Decoded and touched, so the work is not optimised away.
      fields += Object.keys(unpack(msg.data) as object).length;
      received++;
    },
  });
  await nc.flush();
  process.on('message', (m: { t: string }) => {
    if (m.t === 'count') process.send!({ t: 'count', received, fields });
  });
  process.send({ t: 'ready' });
  process.on('disconnect', () => void nc.close().finally(() => process.exit(0)));
}

main().catch((err: unknown) => {
  process.stderr.write(`control-subscriber: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
