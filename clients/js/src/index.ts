export { FerryClient, HeldLock } from './client.js'
export type {
  FerryClientOptions,
  FerryEvent,
  Mutation,
  Op,
  Row,
  Status,
  TableSchema,
  User,
  WebSocketConstructor,
  WebSocketLike,
} from './client.js'
export { FerryError } from './errors.js'
export { IndexedDBStorage, KeyValueStorage, MemoryStorage } from './storage.js'
export type { AsyncStorageLike, Change, StorageAdapter, Stored } from './storage.js'
