// Storage behind one small interface: a key-value map whose writes commit atomically in
// groups. The client keeps a mirror in memory and hands every change (a row and its
// mutation, a merged page, the session) to `commit` as one group.

/** A JSON value as stored. */
export type Stored = unknown

/** One atomic group of writes: a value for a key, or null to delete it. */
export type Change = Map<string, Stored | null>

/** What the client needs from a store. Every `commit` is all-or-nothing. */
export interface StorageAdapter {
  /** Every key and value (the client reads once, at start). */
  readAll(): Promise<Map<string, Stored>>
  /** Applies `change` atomically: after a crash at any point, all of it or none. */
  commit(change: Change): Promise<void>
}

/** In memory: for tests, and for a session that needs nothing kept. */
export class MemoryStorage implements StorageAdapter {
  private readonly data = new Map<string, string>()
  async readAll(): Promise<Map<string, Stored>> {
    const out = new Map<string, Stored>()
    for (const [key, value] of this.data) out.set(key, JSON.parse(value))
    return out
  }
  async commit(change: Change): Promise<void> {
    for (const [key, value] of change) {
      if (value === null) this.data.delete(key)
      else this.data.set(key, JSON.stringify(value))
    }
  }
}

/**
 * The shape of React Native's `@react-native-async-storage/async-storage` default export
 * (the methods used here). Each `setItem` of one key is atomic; `multiSet` is not
 * promised to be atomic across a kill, so it is never relied on for that.
 */
export interface AsyncStorageLike {
  getItem(key: string): Promise<string | null>
  setItem(key: string, value: string): Promise<void>
  removeItem(key: string): Promise<void>
  getAllKeys(): Promise<readonly string[]>
  multiGet(keys: readonly string[]): Promise<readonly (readonly [string, string | null])[]>
  multiSet?(pairs: [string, string][]): Promise<void>
  multiRemove?(keys: readonly string[]): Promise<void>
}

/**
 * A key-value store such as AsyncStorage, made atomic with a write-ahead record.
 *
 * Key layout under `prefix` (default `ferry:`): `<prefix>wal` holds the whole group being
 * committed (one `setItem`, atomic), `<prefix>k:<key>` each value. A commit writes the WAL
 * record, then each key, then removes the record. Opening replays a record left by a kill
 * (writing absolute values, so replaying twice is harmless) before reading. So a kill
 * between any two awaits leaves either the old group (record not yet written) or the new
 * one (record written: replayed on open).
 */
export class KeyValueStorage implements StorageAdapter {
  private readonly wal: string
  private readonly keyPrefix: string
  constructor(private readonly store: AsyncStorageLike, prefix = 'ferry:') {
    this.wal = `${prefix}wal`
    this.keyPrefix = `${prefix}k:`
  }

  async readAll(): Promise<Map<string, Stored>> {
    const pending = await this.store.getItem(this.wal)
    if (pending !== null) await this.apply(JSON.parse(pending) as [string, Stored | null][])
    const keys = (await this.store.getAllKeys()).filter((key) => key.startsWith(this.keyPrefix))
    const out = new Map<string, Stored>()
    if (keys.length === 0) return out
    for (const [key, value] of await this.store.multiGet(keys)) {
      if (value !== null) out.set(key.slice(this.keyPrefix.length), JSON.parse(value))
    }
    return out
  }

  async commit(change: Change): Promise<void> {
    const entries = [...change]
    if (entries.length === 0) return
    if (entries.length === 1) {
      // One key is atomic by itself.
      return this.apply(entries)
    }
    await this.store.setItem(this.wal, JSON.stringify(entries))
    await this.apply(entries)
    await this.store.removeItem(this.wal)
  }

  private async apply(entries: [string, Stored | null][]): Promise<void> {
    const sets: [string, string][] = []
    const removes: string[] = []
    for (const [key, value] of entries) {
      if (value === null) removes.push(this.keyPrefix + key)
      else sets.push([this.keyPrefix + key, JSON.stringify(value)])
    }
    if (sets.length > 0) {
      if (this.store.multiSet) await this.store.multiSet(sets)
      else for (const [key, value] of sets) await this.store.setItem(key, value)
    }
    if (removes.length > 0) {
      if (this.store.multiRemove) await this.store.multiRemove(removes)
      else for (const key of removes) await this.store.removeItem(key)
    }
  }
}

/** IndexedDB (browsers): one object store, every commit one IDB transaction. */
export class IndexedDBStorage implements StorageAdapter {
  private db: Promise<IDBDatabase> | null = null
  constructor(private readonly name = 'ferry', private readonly factory?: IDBFactory) {}

  private open(): Promise<IDBDatabase> {
    if (this.db) return this.db
    const factory = this.factory ?? (globalThis as { indexedDB?: IDBFactory }).indexedDB
    if (!factory) return Promise.reject(new Error('IndexedDB is not available here'))
    this.db = new Promise((resolve, reject) => {
      const request = factory.open(this.name, 1)
      request.onupgradeneeded = () => request.result.createObjectStore('kv')
      request.onsuccess = () => resolve(request.result)
      request.onerror = () => reject(request.error)
    })
    return this.db
  }

  async readAll(): Promise<Map<string, Stored>> {
    const db = await this.open()
    return new Promise((resolve, reject) => {
      const out = new Map<string, Stored>()
      const tx = db.transaction('kv', 'readonly')
      const cursor = tx.objectStore('kv').openCursor()
      cursor.onsuccess = () => {
        const current = cursor.result
        if (!current) return
        out.set(String(current.key), current.value)
        current.continue()
      }
      tx.oncomplete = () => resolve(out)
      tx.onerror = () => reject(tx.error)
    })
  }

  async commit(change: Change): Promise<void> {
    const db = await this.open()
    return new Promise((resolve, reject) => {
      const tx = db.transaction('kv', 'readwrite')
      const store = tx.objectStore('kv')
      for (const [key, value] of change) {
        if (value === null) store.delete(key)
        else store.put(value, key)
      }
      tx.oncomplete = () => resolve()
      tx.onerror = () => reject(tx.error)
      tx.onabort = () => reject(tx.error ?? new Error('IndexedDB transaction aborted'))
    })
  }
}
