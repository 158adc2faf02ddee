// Public API of the device model: declare a PCI device, serve it over vfio-user, and (for
// tests and benchmarks) talk to it with the TypeScript client. See README.md here.
//
//   const device = new PciDevice({
//     name: 'gpu0',
//     pci: { vendorId: 0x1de5, deviceId: 0x6b75, classCode: 0x030200 },
//     capabilities: { msix: { bar: 0, tableOffset: 0xff0000, pbaOffset: 0xff8000 } },
//     regions: {
//       0: { size: 16 << 20, handler: { read: (o, s) => ..., write: (o, s, v) => ... } },
//       1: { size: 1 << 30, kind: 'mem64', prefetchable: true, backing: { fd: vramFd } },
//     },
//     irqs: { msix: 4, err: 1 },
//     callbacks: { reset: () => ..., dmaUnmapped: (m) => ... },
//   });
//   const server = new Server();
//   server.listen('/run/vugpu/gpu0.sock', device);
//   device.irq.msix(0);                              // fire MSI-X vector 0
//   device.dma.translate(gpa, len, true);            // guest memory → fd extents

export { Server, Listener, type ServerOptions, type ClientGone } from './server.ts';
export { PciDevice, DeclarationError, validateDeclaration, type RegionInfo } from './device.ts';
export type {
  BarKind,
  CapabilityDeclaration,
  DeviceCallbacks,
  DeviceDeclaration,
  IrqCounts,
  MsixDeclaration,
  PciIdentity,
  PcieDeviceType,
  RegionBacking,
  RegionDeclaration,
  RegionHandler,
  ResetReason,
  SparseArea,
} from './declaration.ts';
export { Endpoint, maxMessageSize, type EndpointOptions, type EndpointStats } from './endpoint.ts';
export { SocketTransport, type Transport, type TransportSink, type CloseReason, type CloseKind } from './transport.ts';
export { MemoryTransport, type MemoryTransportOptions } from './memory-transport.ts';
export { MessageFramer, FramingError, type IncomingMessage } from './framing.ts';
export { ConfigSpace, type ConfigState, type ConfigWriteHook } from './config-space.ts';
export { buildConfigLayout, PciReg, PciCommand, PciStatus, PciCapId, type ConfigLayout, type ConfigField } from './config-layout.ts';
export {
  DmaTable,
  DMA_MAX_MAP_SIZE,
  DEFAULT_DMA_LIMITS,
  type DmaLimits,
  type DmaMapRequest,
  type DmaMappingInfo,
  type DmaFault,
  type DmaFaultKind,
  type TranslateResult,
  type ViewResult,
} from './dma.ts';
export { IrqController, type IrqSetRequest, type IrqState, type VectorStats } from './irq.ts';
export { DEFAULT_SERVER_CAPS, type ServerCapabilities, type ClientCapabilities } from './version.ts';
export { DEFAULT_LIMITS, LogBudget, type ServerLimits } from './limits.ts';
export { VfioUserClient, VfioUserError, QEMU_VERSION_JSON, type Reply, type RegionInfoResult } from './client.ts';
export * as protocol from './protocol.ts';
