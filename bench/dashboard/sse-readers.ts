/**
 * A process of the dashboard bench that holds `count` streams of a manager's `GET /events` open
 * and reads them as a page's EventSource would, without rendering: the other nine of "ten pages
 * open", kept out of the browser so that ten renderers do not take the two cores the manager is
 * measured on. Prints `ready` once every stream had its snapshot; on SIGTERM prints one JSON
 * line (events and bytes read per stream, streams that ended) and exits.
 *
 *   node dist/bench/dashboard/sse-readers.js <port> <count>
 */
import { get, type ClientRequest } from 'node:http';

const [port, count] = process.argv.slice(2).map(Number) as [number, number];
const streams: { req: ClientRequest; bytes: number; events: number; snapshot: boolean; ended: boolean }[] = [];
let announced = false;

for (let i = 0; i < count; i++) {
  const stream = { req: null as unknown as ClientRequest, bytes: 0, events: 0, snapshot: false, ended: false };
  stream.req = get({ host: '127.0.0.1', port, path: '/events', headers: { accept: 'text/event-stream' } }, (res) => {
    if (res.statusCode !== 200) {
      process.stderr.write(`sse-readers: /events answered ${res.statusCode}\n`);
      process.exit(1);
    }
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => {
      stream.bytes += Buffer.byteLength(chunk);
      for (const line of chunk.split('\n')) {
        if (line === 'event: snapshot') stream.snapshot = true;
        if (line.startsWith('event: ')) stream.events++;
      }
      if (!announced && streams.length === count && streams.every((s) => s.snapshot)) {
        announced = true;
        process.stdout.write('ready\n');
      }
    });
    res.on('end', () => (stream.ended = true));
  });
  stream.req.on('error', () => (stream.ended = true));
  streams.push(stream);
}

process.on('SIGTERM', () => {
  const summary = {
    streams: count,
    ended: streams.filter((s) => s.ended).length,
    events: streams.map((s) => s.events),
    bytes: streams.map((s) => s.bytes),
  };
  process.stdout.write(`${JSON.stringify(summary)}\n`);
  for (const s of streams) s.req.destroy();
  process.exit(0);
});
