// The trace schema (schema.proto), loaded by reflection: protobufjs generates specialised
// encoders/decoders for each type at load time, as fast as pbjs static code, without a
// generated file to keep in sync. The interfaces below are the plain-object shapes of those
// messages (protobufjs camelCases the .proto field names).
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

export const TRACE_FORMAT = 'vugpu-trace';
export const TRACE_VERSION = 1;

const root = protobuf.loadSync(path.join(path.dirname(fileURLToPath(import.meta.url)), 'schema.proto'));

export const TraceHeaderType = root.lookupType('vugpu.trace.TraceHeader');
export const TraceBatchType = root.lookupType('vugpu.trace.TraceBatch');

export interface EngineConfig {
  vramBytes?: number;
  channels?: number;
  watchdogMs?: number;
  policy?: string;
}

export interface VmInfo {
  id: number;
  name: string;
  mode: string;
}

export interface RegisterName {
  offset: number;
  name: string;
  /** 0 or 4: one register; more: a range. */
  size?: number;
}

export interface TraceHeader {
  format: string;
  version: number;
  startUnixMs: number;
  engine?: EngineConfig;
  vms: VmInfo[];
  registers: RegisterName[];
  comment?: string;
}

export interface MmioAccess {
  region: number;
  offset: number;
  size: number;
  write: boolean;
  value: number;
  valueHi: number;
  latencyNs?: number | null;
}
export interface TlbFlush { all: boolean; pdAddr: number }
export interface ShadowRebuild { ptes: number; pdAddr: number }
export interface Hypercall { op: number; count: number; result: number }
export interface Doorbell { chid: number }
export interface Fault { chid: number; va: number; reason: number; write: boolean; unit: number }
export interface ChannelError { chid: number; code: number }
export interface VmAttach { name: string; mode: string }
export interface VmDetach { reason: string }

/** The `event` oneof: exactly one of these is set on a record. */
export interface TraceEvents {
  mmio?: MmioAccess;
  tlbFlush?: TlbFlush;
  shadowRebuild?: ShadowRebuild;
  hypercall?: Hypercall;
  doorbell?: Doorbell;
  fault?: Fault;
  channelError?: ChannelError;
  vmAttach?: VmAttach;
  vmDetach?: VmDetach;
}
export type EventType = keyof TraceEvents;
export const EVENT_TYPES: readonly EventType[] = [
  'mmio', 'tlbFlush', 'shadowRebuild', 'hypercall', 'doorbell', 'fault', 'channelError', 'vmAttach', 'vmDetach',
];

export interface TraceRecord extends TraceEvents {
  dtNs: number;
  vm: number;
}

export interface TraceBatch {
  baseNs: number;
  dropped: number;
  records: TraceRecord[];
}
