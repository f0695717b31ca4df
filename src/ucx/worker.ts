import { native, UCX_DEFAULTS, type Mapping, type UcxNativeEvent, type UcxNativeStats, type UcxNativeWorker } from '../native/index.js';
import { InvalidInputError, LaminarError } from '../common/errors.js';
import { Endpoint } from './endpoint.js';
import { IncomingMessage } from './message.js';
import { userNetDevices, type NetDeviceChoice } from './net-devices.js';
import { ErrorCodes } from '../common/error-codes.js';

export interface UcxWorkerOptions {
  /** Largest inline (eager) payload copied for JS; bigger ones are dropped and flagged. */
  maxEagerBytes?: number;
  /** Longest the worker progresses in one event-loop turn before yielding (ms, default 2). */
  budgetMs?: number;
  /** Called for messages that arrive on an endpoint nobody knows (counted by the owner). */
  onStray?: (message: IncomingMessage) => void;
  /**
   * Called when a handler throws: an endpoint's `onMessage` or close handler, a listener's
   * `onConnection`, `onStray`. The worker has already closed the endpoint concerned by force (its
   * close handlers get `error`, code ERR_UCX_HANDLER_FAILED, the thrown error as its `cause`) and
   * goes on serving the others. Without this option the error becomes a process warning.
   */
  onHandlerError?: (error: LaminarError, endpoint: Endpoint | undefined) => void;
  /**
   * Called when UCX could not create the endpoint of an incoming connection (`error.code` is the
   * UCS status; the peer sees its connection fail). Without it, a process warning.
   */
  onAcceptError?: (error: LaminarError, address: string) => void;
  /** The network devices this worker's UCX may use, in place of UCX_NET_DEVICES (net-devices.ts). */
  netDevices?: NetDeviceChoice | null;
}

export interface Listener {
  readonly port: number;
  close(): void;
}

/**
 * A registration of a whole mapping with UCX (RDMA pinning); release it when done. UCX registers
 * on the thread pool (pinning a large version takes seconds on RDMA): until `ready` resolves,
 * sends from the mapping go unregistered, which works, registered per operation. `ready` rejects
 * (with the UCS status as its code) when UCX could not register it, and the mapping stays usable
 * the same way; it is never an unhandled rejection.
 */
export interface Registration {
  readonly ready: Promise<void>;
  release(): void;
}

/**
 * A UCX worker on the Node event loop (see native/ucx_binding.h): listeners, endpoints and memory
 * registrations. Transports are UCX's choice, steered by its environment (UCX_TLS,
 * UCX_NET_DEVICES, or `netDevices` per worker): TCP on loopback and between network namespaces,
 * RDMA verbs on InfiniBand or RoCE. The worker keeps the process alive while open (like a
 * server); unref() to not.
 */
export { UCX_DEFAULTS };

export class UcxWorker {
  private readonly handle: UcxNativeWorker;
  private readonly endpoints = new Map<number, Endpoint>();
  private readonly listeners = new Map<number, (endpoint: Endpoint) => void>();
  private closedFlag = false;
  private handlerErrors = 0;
  private acceptFailures = 0;

  constructor(private readonly options: UcxWorkerOptions = {}) {
    const nativeOptions: { maxEagerBytes?: number; budgetMs?: number; netDevices?: string; onError: (err: unknown) => void } = {
      // dispatch() catches what each handler throws: this is for what escapes it anyway.
      onError: (err) => this.handlerFailed(undefined, 'events', err),
    };
    if (options.maxEagerBytes !== undefined) nativeOptions.maxEagerBytes = options.maxEagerBytes;
    if (options.budgetMs !== undefined) nativeOptions.budgetMs = options.budgetMs;
    if (options.netDevices) nativeOptions.netDevices = options.netDevices.devices.join(',');
    this.handle = new native.UcxWorker((events) => this.dispatch(events), nativeOptions);
  }

  /** The network devices UCX may use here (given, or the user's UCX_NET_DEVICES); null: all. */
  get netDevices(): NetDeviceChoice | null {
    return this.options.netDevices ?? userNetDevices();
  }

  get closed(): boolean {
    return this.closedFlag;
  }

  /** Accepts connections on host:port (port 0: any free port); `onConnection` gets each endpoint. */
  listen(host: string, port: number, onConnection: (endpoint: Endpoint) => void): Listener {
    const { id, port: bound } = this.handle.listen(host, port);
    this.listeners.set(id, onConnection);
    return {
      port: bound,
      close: () => {
        if (!this.listeners.delete(id) || this.closedFlag) return;
        this.handle.closeListener(id);
      },
    };
  }

  /** Connects to a listener. Returns at once; a failure to connect closes the endpoint with an error. */
  connect(host: string, port: number): Endpoint {
    const id = this.handle.connect(host, port);
    return this.adopt(id, `${host}:${port}`);
  }

  register(mapping: Mapping): Registration {
    const { id, ready } = this.handle.register(mapping);
    ready.catch(() => undefined);
    let released = false;
    return {
      ready,
      release: () => {
        if (released || this.closedFlag) return;
        released = true;
        this.handle.unregister(id);
      },
    };
  }

  /** The native worker's counts, plus endpoints tracked here, handlers that threw and accepts that failed. */
  stats(): UcxNativeStats & { tracked: number; handlerErrors: number; acceptFailures: number } {
    return { ...this.handle.stats(), tracked: this.endpoints.size, handlerErrors: this.handlerErrors, acceptFailures: this.acceptFailures };
  }

  ref(): void {
    this.handle.ref();
  }

  unref(): void {
    this.handle.unref();
  }

  /** Closes everything: endpoints are closed by force, pending operations rejected. */
  close(): void {
    if (this.closedFlag) return;
    this.closedFlag = true;
    this.handle.close();
    for (const endpoint of [...this.endpoints.values()]) endpoint.abandon();
    this.endpoints.clear();
    this.listeners.clear();
  }

  private adopt(id: number, peer: string): Endpoint {
    const endpoint = new Endpoint(
      this.handle,
      id,
      peer,
      (gone) => this.endpoints.delete(gone),
      (ep, err) => this.handlerFailed(ep, 'close', err),
    );
    this.endpoints.set(id, endpoint);
    return endpoint;
  }

  private dispatch(events: UcxNativeEvent[]): void {
    for (const event of events) {
      try {
        this.dispatchOne(event);
      } catch (err) {
        // What one peer's event made a handler throw costs that peer's endpoint: never the
        // worker (a relay serves every other peer on it), nor the rest of the batch.
        this.handlerFailed(event.endpoint === undefined ? undefined : this.endpoints.get(event.endpoint), event.type, err);
      }
    }
  }

  /** A handler threw while handling `what` of `endpoint`: the endpoint is dropped, the owner told. */
  private handlerFailed(endpoint: Endpoint | undefined, what: string, err: unknown): void {
    this.handlerErrors++;
    const cause = err instanceof Error ? err : new Error(String(err));
    const causeCode = (cause as { code?: unknown }).code;
    const error = new LaminarError(ErrorCodes.UCX_HANDLER_FAILED, `a handler of ${what}${endpoint ? ` from ${endpoint.peer}` : ''} threw: ${cause.message}`, {
      cause,
      details: { ...(endpoint ? { peer: endpoint.peer } : {}), ...(typeof causeCode === 'string' ? { causeCode } : {}) },
    });
    endpoint?.abort(error);
    if (this.options.onHandlerError) this.options.onHandlerError(error, endpoint);
    else process.emitWarning(error);
  }

  private dispatchOne(event: UcxNativeEvent): void {
    switch (event.type) {
      case 'message': {
        const message = new IncomingMessage(this.handle, event.header, event.length, event.data, event.desc, event.dropped === true);
        const endpoint = this.endpoints.get(event.endpoint);
        if (endpoint?.onMessage !== undefined) {
          try {
            endpoint.onMessage(message);
          } catch (err) {
            message.release(); // a payload left waiting would hold the sender's buffer until the worker closes
            throw err;
          }
        } else {
          message.release();
          this.options.onStray?.(message);
        }
        return;
      }
      case 'accept': {
        if (event.endpoint === undefined) {
          // UCX could not create the endpoint (the peer sees its connection fail).
          this.acceptFailures++;
          const error =
            event.error instanceof LaminarError
              ? event.error
              : new LaminarError(ErrorCodes.INTERNAL, `accepting a connection from ${event.address} failed`, { cause: event.error });
          if (this.options.onAcceptError) this.options.onAcceptError(error, event.address);
          else process.emitWarning(error);
          return;
        }
        const endpoint = this.adopt(event.endpoint, event.address);
        const onConnection = this.listeners.get(event.listener);
        if (onConnection === undefined) {
          void endpoint.close(true);
          return;
        }
        onConnection(endpoint);
        return;
      }
      case 'error': {
        this.endpoints.get(event.endpoint)?.abort(event.error);
        return;
      }
    }
  }
}

/** Parses "host:port" (IPv4, or [IPv6]:port). Host names are not resolved here. */
export function parseAddress(text: string): { host: string; port: number } {
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+)):(\d{1,5})$/.exec(text.trim());
  const port = match === null ? NaN : Number(match[3]);
  if (match === null || !(port > 0 && port < 65536)) {
    throw new InvalidInputError(ErrorCodes.BAD_ADDRESS, `expected address:port with a numeric address, got "${text}"`);
  }
  return { host: (match[1] ?? match[2]) as string, port };
}
