/** UCX transport: a worker on the Node event loop, endpoints, messages with zero-copy payloads. */
export { assertAddressUp } from './interfaces.js';
export { assertRoutable, devicesOfOwnAddress, devicesToward, type NetDeviceChoice } from './net-devices.js';
export { UcxWorker, parseAddress, type Listener, type Registration, type UcxWorkerOptions } from './worker.js';
export { Endpoint, type Payload, type MessageHandler, type CloseHandler } from './endpoint.js';
export { IncomingMessage } from './message.js';
