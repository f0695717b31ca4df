/**
 * The unix socket of a local API (the relay's, the sampler service's) and the connections on it:
 * the socket file made with its mode, a dead server's file told from a live server, every client
 * a connection of the server's own kind until its socket closes, and the file removed on close.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { chmod, mkdir, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import { ConflictError, ErrorCodes } from './errors.js';
import type { Logger } from './logger.js';

export interface UnixSocketServerOptions<C> {
  path: string;
  /** Mode of the socket file (connecting needs write permission on it). */
  mode: number;
  /** Who would be listening on the path already, in ERR_SOCKET_IN_USE's message: "another relay is listening on …". */
  owner: string;
  logger: Logger;
  /** The connection of a client that just connected; `id` is unique in this server. */
  create: (id: number, socket: Socket) => C;
  /** After a client connected (it is among `connections`). */
  opened?: (connection: C) => void;
  /** After a client's socket closed (it has left `connections`): what it held is released here. */
  closed: (connection: C) => void;
}

export class UnixSocketServer<C extends { readonly socket: Socket }> {
  private server: Server | null = null;
  private readonly open = new Map<number, C>();
  private nextId = 1;

  constructor(private readonly options: UnixSocketServerOptions<C>) {}

  /** The connections whose socket has not closed yet. */
  get connections(): ReadonlyMap<number, C> {
    return this.open;
  }

  /** Fails with ERR_SOCKET_IN_USE when a live server answers on the path. */
  async listen(): Promise<void> {
    const { path } = this.options;
    await mkdir(dirname(path), { recursive: true, mode: 0o750 });
    await removeStaleSocket(path, this.options.owner);
    const server = createServer((socket) => this.accept(socket));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(path, () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', (err) => this.options.logger.error({ err }, 'socket server error'));
    await chmod(path, this.options.mode);
    this.server = server;
  }

  /** Stops accepting, ends every connection (each is `closed` as its socket closes) and removes the socket file. */
  async close(): Promise<void> {
    const server = this.server;
    this.server = null;
    for (const c of this.open.values()) c.socket.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
    await unlink(this.options.path).catch(() => undefined);
  }

  private accept(socket: Socket): void {
    const id = this.nextId++;
    const connection = this.options.create(id, socket);
    this.open.set(id, connection);
    this.options.opened?.(connection);
    socket.on('close', () => {
      this.open.delete(id);
      this.options.closed(connection);
    });
  }
}

/** A socket file left by a dead process is removed; one that still answers belongs to a live one (ERR_SOCKET_IN_USE). */
export async function removeStaleSocket(path: string, owner: string): Promise<void> {
  const live = await new Promise<boolean>((resolve) => {
    const probe = createConnection(path);
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
  if (live) throw new ConflictError(ErrorCodes.SOCKET_IN_USE, `another ${owner} is listening on ${path}`);
  await unlink(path).catch(() => undefined);
}
