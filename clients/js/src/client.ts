import { FerryError } from './errors.js'
import { Change, StorageAdapter, Stored } from './storage.js'

export type Row = Record<string, unknown>
export type Op = 'insert' | 'upsert' | 'delete'

/** A queued write, as stored and as pushed. */
export interface Mutation {
  id: number
  table: string
  op: Op
  row?: Row
  key?: Row
}

export interface User {
  id: string
  is_anonymous: boolean
  email: string | null
  email_confirmed: boolean
}

interface Session {
  user: User
  access_token: string
  refresh_token: string
  /** Epoch ms when the access token ends; `lifetime` its length in ms. */
  expires_at: number
  lifetime: number
}

export interface TableSchema {
  name: string
  strategy: string
  key: string[]
  owner: string | null
  columns: { name: string; type: string }[]
}

export type Status = {
  /** Whether a stream is open and said hello. */
  connected: boolean
  /** Writes not yet answered by the server. */
  pending: number
  /** When a pull last finished (epoch ms), or null. */
  lastSyncedAt: number | null
  /** The signed-in user, or null before the first sign-up. */
  user: User | null
  /** The last failure of a sync pass, if the next one has not succeeded yet. */
  lastError: string | null
}

export type FerryEvent =
  | { type: 'rejected'; mutation: Mutation; code: string; message: string }
  | { type: 'reset'; reason: string }
  | { type: 'session_lost'; code: string }
  | { type: 'lock_lost'; table: string; key: string; holder: string | null }

/** A WebSocket constructor in the browser's shape (Node: Debian's `ws`, injected). */
export type WebSocketConstructor = new (url: string) => WebSocketLike
export interface WebSocketLike {
  readyState: number
  onopen: ((event: unknown) => void) | null
  onmessage: ((event: { data: unknown }) => void) | null
  onclose: ((event: { code: number; reason?: string }) => void) | null
  onerror: ((event: unknown) => void) | null
  send(data: string): void
  close(code?: number, reason?: string): void
  /** Node's `ws` only: lets the watchdog see the server's pings. */
  on?(event: 'ping', listener: () => void): unknown
}

export interface FerryClientOptions {
  /** The gateway's base URL, `https://sync.example.org`. */
  url: string
  storage: StorageAdapter
  /** `websocket` (default where a WebSocket is available), `sse`, or `none` (no stream). */
  stream?: 'websocket' | 'sse' | 'none'
  WebSocket?: WebSocketConstructor
  fetch?: typeof fetch
  /** Milliseconds a request may take, start to last byte (default 30 000). */
  requestTimeout?: number
  /** Most mutations per push (default 500; the server takes 1 000). */
  batchSize?: number
  /** About this many bytes of mutations per push (default 512 KiB; the server takes 1 MiB). */
  batchBytes?: number
  /** Backoff cap for drain retries and reconnects, ms (default 30 000). */
  maxBackoff?: number
  /** The name of the cross-tab refresh lock (default `ferry-refresh:<url>`). */
  lockName?: string
  log?: (line: string) => void
}

const OUTBOX = 'o:'
const ROW = 'r:'
const SERVER = 's:'

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

function uuid(): string {
  const c = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto
  if (c?.randomUUID) return c.randomUUID()
  const hex = [...Array(32)].map(() => Math.floor(Math.random() * 16).toString(16))
  hex[12] = '4'
  hex[16] = ((parseInt(hex[16], 16) & 3) | 8).toString(16)
  const s = hex.join('')
  return `${s.slice(0, 8)}-${s.slice(8, 12)}-${s.slice(12, 16)}-${s.slice(16, 20)}-${s.slice(20)}`
}

/** A mutex that is one per process; across tabs, the Web Locks API when there is one. */
async function withLock<T>(name: string, local: { tail: Promise<unknown> }, body: () => Promise<T>): Promise<T> {
  const locks = (globalThis as { navigator?: { locks?: { request: (n: string, f: () => Promise<T>) => Promise<T> } } })
    .navigator?.locks
  const run = locks ? () => locks.request(name, body) : body
  const previous = local.tail
  let release!: () => void
  local.tail = new Promise<void>((resolve) => (release = resolve))
  try {
    await previous.catch(() => undefined)
    return await run()
  } finally {
    release()
  }
}

/** A held `device_lock` row: heartbeats every third of the stale limit until released or lost. */
export class HeldLock {
  private timer: ReturnType<typeof setInterval> | null = null
  lost = false
  constructor(
    private readonly client: FerryClient,
    readonly table: string,
    readonly key: string,
    readonly holder: string,
    intervalMs: number,
  ) {
    this.timer = setInterval(() => void this.heartbeat(), intervalMs)
  }
  /** One heartbeat now; false (and `lock_lost`) once another device took it. */
  async heartbeat(): Promise<boolean> {
    if (this.lost) return false
    try {
      await this.client.request('POST', this.path('heartbeat'), {})
      return true
    } catch (error) {
      if (error instanceof FerryError && error.code === 'lock_lost') {
        this.markLost((error.details.holder as string | null) ?? null)
        return false
      }
      return true
    }
  }
  async release(): Promise<void> {
    this.stop()
    await this.client.request('POST', this.path('release'), {})
  }
  stop(): void {
    if (this.timer) clearInterval(this.timer)
    this.timer = null
  }
  markLost(holder: string | null): void {
    if (this.lost) return
    this.lost = true
    this.stop()
    this.client.emit({ type: 'lock_lost', table: this.table, key: this.key, holder })
  }
  private path(action: string): string {
    return `/v1/locks/${encodeURIComponent(this.table)}/${encodeURIComponent(this.key)}/${action}`
  }
}

/**
 * The client: one per device and app. `FerryClient.open` reads the store, signs up
 * anonymously on first launch, and starts syncing.
 */
export class FerryClient {
  private data = new Map<string, Stored>()
  private rowsByTable = new Map<string, Map<string, Row>>()
  private serverByTable = new Map<string, Map<string, Row>>()
  private outbox: Mutation[] = []
  /**
   * Outbox mutations whose storage commit has not finished, never pushed: were one pushed
   * and the process killed before its commit, the server would keep its id while the
   * device forgot it, and the device's next mutation would reuse the id and be answered
   * `duplicate`, lost.
   */
  private readonly unsaved = new Set<number>()
  private schema = new Map<string, TableSchema>()
  private session: Session | null = null
  private deviceId = ''
  private cursor: string | null = null
  private nextId = 1
  private readonly fetcher: typeof fetch
  private readonly tableObservers = new Map<string, Set<(rows: Row[]) => void>>()
  private readonly statusObservers = new Set<(status: Status) => void>()
  private readonly eventObservers = new Set<(event: FerryEvent) => void>()
  private readonly commitTail = { tail: Promise.resolve() as Promise<unknown> }
  private readonly refreshTail = { tail: Promise.resolve() as Promise<unknown> }
  private passRunning: Promise<void> | null = null
  private passWanted = false
  private retryTimer: ReturnType<typeof setTimeout> | null = null
  private failures = 0
  private epoch = 0
  private closed = false
  private stream: { close(): void } | null = null
  private streamAttempts = 0
  private reconnectTimer: ReturnType<typeof setTimeout> | null = null
  private readonly locks = new Map<string, HeldLock>()
  /** How many streams this client has opened (for diagnostics and tests). */
  streamsOpened = 0
  private statusValue: Status = { connected: false, pending: 0, lastSyncedAt: null, user: null, lastError: null }

  private constructor(private readonly options: FerryClientOptions) {
    this.fetcher = options.fetch ?? fetch.bind(globalThis)
  }

  /** Opens the store, signs up anonymously when it holds no session, and starts syncing. */
  static async open(options: FerryClientOptions & { autoStart?: boolean }): Promise<FerryClient> {
    const client = new FerryClient(options)
    await client.load()
    if (!client.session) await client.signUpAnonymously()
    if (client.schema.size === 0) await client.loadSchema().catch(() => undefined)
    if (options.autoStart !== false) client.start()
    return client
  }

  // MARK: - Reading and observing

  /** The table's rows as the app sees them (the server's plus pending writes). */
  rows(table: string): Row[] {
    return [...(this.rowsByTable.get(table)?.values() ?? [])]
  }
  /** One row by its key columns (owner optional). */
  row(table: string, key: Row): Row | undefined {
    return this.rowsByTable.get(table)?.get(this.keyOf(table, key))
  }
  /** Calls `observer` with the table's rows now and after every change; returns the unsubscribe. */
  observe(table: string, observer: (rows: Row[]) => void): () => void {
    let set = this.tableObservers.get(table)
    if (!set) this.tableObservers.set(table, (set = new Set()))
    set.add(observer)
    observer(this.rows(table))
    return () => set!.delete(observer)
  }
  onStatus(observer: (status: Status) => void): () => void {
    this.statusObservers.add(observer)
    observer(this.status)
    return () => this.statusObservers.delete(observer)
  }
  onEvent(observer: (event: FerryEvent) => void): () => void {
    this.eventObservers.add(observer)
    return () => this.eventObservers.delete(observer)
  }
  get status(): Status {
    return { ...this.statusValue, pending: this.outbox.length, user: this.session?.user ?? null }
  }
  get user(): User | null {
    return this.session?.user ?? null
  }
  get device(): string {
    return this.deviceId
  }
  /** The mutations not yet answered, oldest first. */
  get pending(): readonly Mutation[] {
    return this.outbox
  }

  // MARK: - Writing

  /**
   * The one line at a write site: writes the row and its mutation in one local commit,
   * then wakes the drain. `upsert` merges the given columns; `delete` takes the key.
   */
  async enqueue(table: string, op: Op, value: Row): Promise<Mutation> {
    const schema = await this.tableSchema(table)
    const full: Row = { ...value }
    if (schema?.owner && full[schema.owner] === undefined && this.session) full[schema.owner] = this.session.user.id
    const key = this.keyOf(table, full)
    const mutation = await this.serialized(async () => {
      const mutation: Mutation =
        op === 'delete'
          ? { id: this.nextId, table, op, key: this.pickKey(table, full) }
          : { id: this.nextId, table, op, row: full }
      const change: Change = new Map()
      this.nextId += 1
      change.set('next_id', this.nextId)
      change.set(OUTBOX + String(mutation.id).padStart(16, '0'), mutation)
      this.outbox.push(mutation)
      this.rebuild(table, key, change)
      this.unsaved.add(mutation.id)
      try {
        await this.commit(change)
      } finally {
        this.unsaved.delete(mutation.id)
      }
      return mutation
    })
    this.notifyTables([table])
    this.kick()
    return mutation
  }

  // MARK: - Sync

  /** Starts the sync loop and the cue stream. */
  start(): void {
    this.closed = false
    this.kick()
    this.openStream()
  }

  /** Stops timers, the stream and heartbeats (the store stays as it is). */
  close(): void {
    this.closed = true
    if (this.retryTimer) clearTimeout(this.retryTimer)
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer)
    this.stream?.close()
    this.stream = null
    for (const lock of this.locks.values()) lock.stop()
    this.setStatus({ connected: false })
  }

  /** Wakes the sync loop (level-triggered: many calls during a pass make one more pass). */
  kick(): void {
    if (this.closed) return
    this.passWanted = true
    if (!this.passRunning) this.passRunning = this.runPasses().finally(() => (this.passRunning = null))
  }

  /** Runs passes until one finds nothing new; rejects with the last failure. */
  async sync(): Promise<void> {
    this.passWanted = true
    while (this.passRunning) await this.passRunning
    await this.pass()
  }

  /** Waits until the outbox is empty and a pass has finished (bounded by `timeoutMs`). */
  async flush(timeoutMs = 30_000): Promise<void> {
    const end = Date.now() + timeoutMs
    while (Date.now() < end) {
      try {
        await this.sync()
        if (this.outbox.length === 0) return
      } catch (error) {
        if (error instanceof FerryError && !error.retryable && error.status !== 401) throw error
      }
      await sleep(200)
    }
    throw new FerryError('timeout', `the outbox did not drain in ${timeoutMs} ms`, 0, true)
  }

  private async runPasses(): Promise<void> {
    while (this.passWanted && !this.closed) {
      this.passWanted = false
      try {
        await this.pass()
        this.failures = 0
        this.setStatus({ lastError: null })
      } catch (error) {
        if (error instanceof FerryError && (error.code === 'session_lost' || error.code === 'signed_out')) return
        this.failures += 1
        const delay = this.backoff(this.failures, error instanceof FerryError ? error.retryAfter : undefined)
        this.options.log?.(`ferry: sync failed (${String(error)}); again in ${delay} ms`)
        this.setStatus({ lastError: String(error) })
        if (this.retryTimer) clearTimeout(this.retryTimer)
        this.retryTimer = setTimeout(() => this.kick(), delay)
        return
      }
    }
  }

  private backoff(attempt: number, retryAfterSeconds?: number): number {
    const cap = Math.min(this.options.maxBackoff ?? 30_000, 500 * 2 ** Math.min(attempt, 10))
    const jitter = Math.floor(Math.random() * cap)
    return Math.max(jitter, (retryAfterSeconds ?? 0) * 1000)
  }

  /** One pass: drain the outbox, then pull until the server has nothing more. */
  private async pass(): Promise<void> {
    await this.drain()
    const leftover = await this.pull()
    if (leftover) await this.drain()
  }

  // MARK: - Drain

  private async drain(): Promise<void> {
    let limit = this.options.batchSize ?? 500
    const maxBytes = this.options.batchBytes ?? 512 * 1024
    let oneAtATime = 0
    for (let guard = 0; guard < 100_000 && this.outbox.length > 0; guard += 1) {
      const batch: Mutation[] = []
      let bytes = 0
      for (const mutation of this.outbox) {
        if (this.unsaved.has(mutation.id)) break
        const size = JSON.stringify(mutation).length + 1
        if (batch.length > 0 && (batch.length >= limit || bytes + size > maxBytes)) break
        batch.push(mutation)
        bytes += size
      }
      if (batch.length === 0) return // what is left is being saved; enqueue kicks again after
      if (oneAtATime > 0) batch.splice(1)
      let answer: { results: { id: number; status: string; original?: string; code?: string; message?: string }[] }
      try {
        answer = (await this.request('POST', '/v1/push', { mutations: batch })) as typeof answer
      } catch (error) {
        if (!(error instanceof FerryError) || error.retryable || error.status === 401) throw error
        if (error.code === 'payload_too_large' && batch.length > 1) {
          limit = Math.max(1, Math.floor(batch.length / 2))
          continue
        }
        if (batch.length > 1) {
          // A final answer for the whole batch: one at a time finds the one to blame.
          oneAtATime = batch.length
          continue
        }
        // Refused alone: rejected, so the queue never stalls.
        answer = { results: [{ id: batch[0].id, status: 'rejected', code: error.code, message: error.message }] }
      }
      if (oneAtATime > 0) oneAtATime -= 1
      await this.settle(batch, answer.results ?? [])
    }
  }

  private async settle(
    batch: Mutation[],
    results: { id: number; status: string; original?: string; code?: string; message?: string }[],
  ): Promise<void> {
    const byId = new Map(results.map((result) => [result.id, result]))
    const rejected: FerryEvent[] = []
    const tables = new Set<string>()
    await this.serialized(async () => {
      const change: Change = new Map()
      for (const mutation of batch) {
        const result = byId.get(mutation.id)
        if (!result) continue
        const index = this.outbox.findIndex((m) => m.id === mutation.id)
        if (index < 0) continue // settled already (a pull brought its row)
        this.outbox.splice(index, 1)
        change.set(OUTBOX + String(mutation.id).padStart(16, '0'), null)
        const key = this.mutationKey(mutation)
        const isRejected =
          result.status === 'rejected' || (result.status === 'duplicate' && result.original === 'rejected')
        if (isRejected) {
          rejected.push({
            type: 'rejected',
            mutation,
            code: result.code ?? 'rejected',
            message: result.message ?? 'the server rejected this write',
          })
        } else {
          const server = this.table(this.serverByTable, mutation.table)
          const next = FerryClient.apply(server.get(key), mutation)
          if (next) server.set(key, next)
          else server.delete(key)
          change.set(SERVER + mutation.table + ':' + key, next ?? null)
        }
        this.rebuild(mutation.table, key, change)
        tables.add(mutation.table)
      }
      await this.commit(change)
    })
    this.notifyTables([...tables])
    for (const event of rejected) this.emit(event)
  }

  // MARK: - Pull and merge

  /** Pulls every page; returns whether mutations the pull could not settle are left. */
  private async pull(): Promise<boolean> {
    for (let guard = 0; guard < 10_000; guard += 1) {
      const startCursor = this.cursor
      const query = startCursor === null ? '' : `?cursor=${encodeURIComponent(startCursor)}`
      let page: {
        changes: Record<string, { upserts?: Row[]; deletes?: Row[] }>
        cursor: string
        has_more: boolean
        last_mutation_id: number
      }
      try {
        page = (await this.request('GET', '/v1/pull' + query)) as typeof page
      } catch (error) {
        if (error instanceof FerryError && (error.code === 'cursor_expired' || error.code === 'invalid_cursor')) {
          await this.dropSynced(error.code)
          continue
        }
        throw error
      }
      await this.merge(startCursor, page)
      if (!page.has_more) break
    }
    this.setStatus({ lastSyncedAt: Date.now() })
    return this.outbox.length > 0
  }

  /** The one merge for every source: server rows written, pending writes replayed on top. */
  private async merge(
    startCursor: string | null,
    page: {
      changes: Record<string, { upserts?: Row[]; deletes?: Row[] }>
      cursor: string
      last_mutation_id: number
    },
  ): Promise<void> {
    const tables = Object.keys(page.changes ?? {})
    for (const table of tables) if (!this.schema.has(table)) await this.loadSchema()
    await this.serialized(async () => {
      if (this.cursor !== startCursor) return // merged meanwhile: pull on from the new cursor
      const change: Change = new Map()
      const touched = new Map<string, Set<string>>()
      for (const table of tables) {
        const server = this.table(this.serverByTable, table)
        const keys = new Set<string>()
        for (const row of page.changes[table].upserts ?? []) {
          const key = this.keyOf(table, row)
          server.set(key, row)
          change.set(SERVER + table + ':' + key, row)
          keys.add(key)
        }
        for (const row of page.changes[table].deletes ?? []) {
          const key = this.keyOf(table, row)
          server.delete(key)
          change.set(SERVER + table + ':' + key, null)
          keys.add(key)
        }
        touched.set(table, keys)
      }
      // Writes the page already contains leave the outbox: the pulled row is the server's truth.
      this.outbox = this.outbox.filter((mutation) => {
        const settled =
          mutation.id <= page.last_mutation_id && touched.get(mutation.table)?.has(this.mutationKey(mutation)) === true
        if (settled) change.set(OUTBOX + String(mutation.id).padStart(16, '0'), null)
        return !settled
      })
      for (const [table, keys] of touched) for (const key of keys) this.rebuild(table, key, change)
      if (page.last_mutation_id >= this.nextId) {
        this.nextId = page.last_mutation_id + 1
        change.set('next_id', this.nextId)
      }
      this.cursor = page.cursor
      change.set('cursor', page.cursor)
      await this.commit(change)
    })
    this.notifyTables(tables)
    this.checkLocks(tables)
  }

  /** Drops the synced rows (not the outbox) and the cursor: the next pull loads afresh. */
  private async dropSynced(reason: string, dropOutbox = false): Promise<void> {
    const tables = new Set([...this.rowsByTable.keys(), ...this.serverByTable.keys()])
    await this.serialized(async () => {
      const change: Change = new Map()
      for (const key of this.data.keys()) {
        if (key.startsWith(SERVER) || key.startsWith(ROW) || (dropOutbox && key.startsWith(OUTBOX))) {
          change.set(key, null)
        }
      }
      this.serverByTable.clear()
      this.rowsByTable.clear()
      if (dropOutbox) this.outbox = []
      for (const mutation of this.outbox) this.rebuild(mutation.table, this.mutationKey(mutation), change)
      this.cursor = null
      change.set('cursor', null)
      await this.commit(change)
    })
    this.notifyTables([...tables])
    this.emit({ type: 'reset', reason })
  }

  /** Recomputes a row: its server version with the pending writes replayed on top. */
  private rebuild(table: string, key: string, change: Change): void {
    let row = this.serverByTable.get(table)?.get(key)
    for (const mutation of this.outbox) {
      if (mutation.table === table && this.mutationKey(mutation) === key) row = FerryClient.apply(row, mutation)
    }
    const rows = this.table(this.rowsByTable, table)
    if (row) rows.set(key, row)
    else rows.delete(key)
    change.set(ROW + table + ':' + key, row ?? null)
  }

  private static apply(row: Row | undefined, mutation: Mutation): Row | undefined {
    if (mutation.op === 'delete') return undefined
    if (mutation.op === 'insert') return row ?? { ...mutation.row }
    return { ...(row ?? {}), ...mutation.row }
  }

  // MARK: - Schema and keys

  /** The table's schema; offline with none stored yet, a guess (`id` within `user_id`) so enqueue never waits on the network. */
  private async tableSchema(table: string): Promise<TableSchema | undefined> {
    if (!this.schema.has(table)) await this.loadSchema().catch(() => undefined)
    return this.schema.get(table) ?? { name: table, strategy: 'lww', key: ['user_id', 'id'], owner: 'user_id', columns: [] }
  }

  private schemaLoad: Promise<void> | null = null

  /** `GET /v1/schema`, one request at a time however many callers ask. */
  private loadSchema(): Promise<void> {
    if (!this.schemaLoad) {
      this.schemaLoad = (async () => {
        const answer = (await this.request('GET', '/v1/schema')) as { tables: TableSchema[] }
        this.schema = new Map(answer.tables.map((table) => [table.name, table]))
        await this.serialized(() => this.commit(new Map([['schema', answer.tables]])))
      })().finally(() => (this.schemaLoad = null))
    }
    return this.schemaLoad
  }

  private keyColumns(table: string): string[] {
    const schema = this.schema.get(table)
    return schema ? schema.key.filter((column) => column !== schema.owner) : ['id']
  }

  private pickKey(table: string, row: Row): Row {
    const key: Row = {}
    for (const column of this.keyColumns(table)) key[column] = row[column]
    return key
  }

  private keyOf(table: string, row: Row): string {
    return JSON.stringify(this.keyColumns(table).map((column) => row[column] ?? null))
  }

  private mutationKey(mutation: Mutation): string {
    return this.keyOf(mutation.table, (mutation.op === 'delete' ? mutation.key : mutation.row) ?? {})
  }

  private table(map: Map<string, Map<string, Row>>, table: string): Map<string, Row> {
    let rows = map.get(table)
    if (!rows) map.set(table, (rows = new Map()))
    return rows
  }

  // MARK: - Store

  private async load(): Promise<void> {
    this.data = await this.options.storage.readAll()
    this.rowsByTable.clear()
    this.serverByTable.clear()
    this.outbox = []
    for (const [key, value] of this.data) {
      if (key.startsWith(OUTBOX)) this.outbox.push(value as Mutation)
      else if (key.startsWith(ROW) || key.startsWith(SERVER)) {
        const rest = key.slice(2)
        const colon = rest.indexOf(':')
        const map = key.startsWith(ROW) ? this.rowsByTable : this.serverByTable
        this.table(map, rest.slice(0, colon)).set(rest.slice(colon + 1), value as Row)
      }
    }
    this.outbox.sort((a, b) => a.id - b.id)
    this.session = (this.data.get('session') as Session | undefined) ?? null
    this.deviceId = (this.data.get('device') as string | undefined) ?? ''
    this.cursor = (this.data.get('cursor') as string | null | undefined) ?? null
    this.nextId = (this.data.get('next_id') as number | undefined) ?? 1
    const last = this.outbox[this.outbox.length - 1]
    if (last && last.id >= this.nextId) this.nextId = last.id + 1
    this.schema = new Map(((this.data.get('schema') as TableSchema[] | undefined) ?? []).map((t) => [t.name, t]))
    if (!this.deviceId) {
      this.deviceId = uuid()
      await this.serialized(() => this.commit(new Map([['device', this.deviceId]])))
    }
  }

  private async commit(change: Change): Promise<void> {
    await this.options.storage.commit(change)
    for (const [key, value] of change) {
      if (value === null) this.data.delete(key)
      else this.data.set(key, value)
    }
  }

  /** Local commits one at a time (each reads and writes the mirror). */
  private serialized<T>(body: () => Promise<T>): Promise<T> {
    const run = this.commitTail.tail.then(body, body)
    this.commitTail.tail = run.catch(() => undefined)
    return run
  }

  // MARK: - HTTP

  /** One API call with the session's token (refreshed when it is about to end, and once on `token_expired`). */
  async request(method: string, path: string, body?: unknown, auth = true): Promise<unknown> {
    if (auth) await this.freshToken()
    try {
      return await this.send(method, path, body, auth ? this.session?.access_token : undefined)
    } catch (error) {
      if (auth && error instanceof FerryError && error.code === 'token_expired') {
        await this.refresh(true)
        return this.send(method, path, body, this.session?.access_token)
      }
      if (auth && error instanceof FerryError && error.code === 'session_revoked') this.lostSession(error.code)
      throw error
    }
  }

  private async send(method: string, path: string, body: unknown, token: string | undefined): Promise<unknown> {
    const headers: Record<string, string> = { Accept: 'application/json' }
    if (token) headers.Authorization = `Bearer ${token}`
    if (body !== undefined) headers['Content-Type'] = 'application/json'
    const controller = new AbortController()
    const timer = setTimeout(() => controller.abort(), this.options.requestTimeout ?? 30_000)
    let response: Response
    let text: string
    try {
      response = await this.fetcher(this.options.url.replace(/\/$/, '') + path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: controller.signal,
      })
      text = await response.text()
    } catch (error) {
      throw new FerryError('network', `${method} ${path}: ${String(error)}`, 0, true)
    } finally {
      clearTimeout(timer)
    }
    let json: unknown = null
    if (text.length > 0) {
      try {
        json = JSON.parse(text)
      } catch {
        throw new FerryError('bad_response', `${method} ${path}: ${response.status} with a body that is not JSON`, response.status, true)
      }
    }
    if (response.ok) return json
    const error = ((json as { error?: Record<string, unknown> } | null)?.error ?? {}) as Record<string, unknown>
    const retryAfter = Number(response.headers.get('Retry-After') ?? '') || undefined
    const code = typeof error.code === 'string' ? error.code : 'bad_response'
    throw new FerryError(
      code,
      typeof error.message === 'string' ? error.message : `${method} ${path}: ${response.status}`,
      response.status,
      response.status >= 500 || response.status === 429 || code === 'bad_response',
      error,
      retryAfter,
    )
  }

  // MARK: - Sessions

  private async freshToken(): Promise<void> {
    const session = this.session
    if (!session) throw new FerryError('signed_out', 'no session: sign in or sign up first', 0, false)
    if (session.expires_at - Date.now() < Math.min(60_000, this.refreshLead(session))) await this.refresh(false)
  }

  /** How long before the token's end it is refreshed: a tenth of its life, 1 min to half. */
  private refreshLead(session: Session): number {
    return Math.min(Math.max(session.lifetime / 10, 60_000), session.lifetime / 2)
  }

  /**
   * One refresh at a time (across tabs with the Web Locks API): a waiter that finds the
   * tokens already renewed takes those. A lost answer is sent again with the same token,
   * three tries within the server's grace window; only a `200` is stored.
   */
  async refresh(force: boolean): Promise<void> {
    const epoch = this.epoch
    const before = this.session
    if (!before) throw new FerryError('signed_out', 'no session', 0, false)
    await withLock(this.options.lockName ?? `ferry-refresh:${this.options.url}`, this.refreshTail, async () => {
      // Another tab (or call) may have refreshed meanwhile: take its tokens.
      const stored = (await this.options.storage.readAll()).get('session') as Session | undefined
      if (stored && stored.refresh_token !== this.session?.refresh_token && stored.user.id === this.session?.user.id) {
        this.session = stored
        this.data.set('session', stored)
      }
      const current = this.session
      if (!current || epoch !== this.epoch) return
      if (current.refresh_token !== before.refresh_token) return
      if (!force && current.expires_at - Date.now() > this.refreshLead(current)) return
      let lastError: unknown
      for (let attempt = 0; attempt < 3; attempt += 1) {
        try {
          const answer = (await this.send('POST', '/v1/auth/refresh', { refresh_token: current.refresh_token }, undefined)) as {
            user: User
            session: { access_token: string; refresh_token: string; expires_in: number }
          }
          if (epoch !== this.epoch) return // signed out or in meanwhile: drop it
          await this.storeSession(answer.user, answer.session)
          return
        } catch (error) {
          lastError = error
          if (error instanceof FerryError && !error.retryable) {
            if (['session_revoked', 'refresh_token_reused', 'unauthorized'].includes(error.code)) this.lostSession(error.code)
            throw error
          }
          if (error instanceof FerryError && (error.retryAfter ?? 0) > 2) throw error
          await sleep(300 + Math.random() * 600)
        }
      }
      throw lastError
    })
  }

  private lostSession(code: string): void {
    this.emit({ type: 'session_lost', code })
    this.stream?.close()
    this.stream = null
    this.setStatus({ connected: false })
  }

  private async storeSession(
    user: User,
    session: { access_token: string; refresh_token: string; expires_in: number },
  ): Promise<void> {
    const lifetime = session.expires_in * 1000
    this.session = { user, access_token: session.access_token, refresh_token: session.refresh_token, expires_at: Date.now() + lifetime, lifetime }
    await this.serialized(() => this.commit(new Map([['session', this.session]])))
    this.setStatus({})
    this.renewStream?.()
  }

  /** Set while a stream is open: hands it the session's new token (WebSocket in band; SSE reopens once warned). */
  private renewStream: (() => void) | null = null

  private async signUpAnonymously(): Promise<void> {
    const answer = (await this.send('POST', '/v1/auth/anonymous', { device_id: this.deviceId }, undefined)) as {
      user: User
      session: { access_token: string; refresh_token: string; expires_in: number }
    }
    this.epoch += 1
    await this.storeSession(answer.user, answer.session)
  }

  // MARK: - Accounts

  /** Adds an email and password to the anonymous account: same user, every row stays. */
  async link(email: string, password: string): Promise<User> {
    const answer = (await this.request('POST', '/v1/auth/link', { email, password })) as { user: User }
    await this.updateUser(answer.user)
    await this.refresh(true).catch(() => undefined)
    return answer.user
  }

  /** Confirms the email with the mailed code. */
  async confirmEmail(code: string): Promise<User> {
    const answer = (await this.request('POST', '/v1/auth/confirm', { code })) as { user: User }
    await this.updateUser(answer.user)
    return answer.user
  }

  async resendConfirmation(): Promise<void> {
    await this.request('POST', '/v1/auth/confirm/resend', {})
  }

  /**
   * Signs in to an email account. The outbox is flushed first. When this device's
   * anonymous account holds rows, the server asks which to keep: this throws a
   * `FerryError` `resolution_required` with `details.device_rows` and `cloud_rows`;
   * call again with `resolve`. `keep_cloud` drops the local data; `keep_device` moves it
   * to the account.
   */
  async signIn(email: string, password: string, options: { resolve?: 'keep_cloud' | 'keep_device' } = {}): Promise<User> {
    const anonymous = this.session?.user.is_anonymous === true
    if (anonymous) await this.flush()
    if (anonymous) await this.freshToken()
    const body: Record<string, unknown> = { email, password, device_id: this.deviceId }
    if (options.resolve) body.resolve = options.resolve
    const answer = (await this.send('POST', '/v1/auth/signin', body, anonymous ? this.session?.access_token : undefined)) as {
      user: User
      session: { access_token: string; refresh_token: string; expires_in: number }
      reset: boolean
    }
    await this.switchAccount(answer.user, answer.session, answer.reset || !anonymous || options.resolve !== 'keep_device')
    return answer.user
  }

  /** Changes the password: a new session for this device, every other one revoked. */
  async changePassword(currentPassword: string, newPassword: string): Promise<void> {
    const answer = (await this.request('POST', '/v1/auth/password', {
      current_password: currentPassword,
      new_password: newPassword,
    })) as { user: User; session: { access_token: string; refresh_token: string; expires_in: number } }
    this.epoch += 1
    await this.storeSession(answer.user, answer.session)
    this.reopenStream()
  }

  /** Mails a reset code (answered the same whether or not the email has an account). */
  async requestPasswordReset(email: string): Promise<void> {
    await this.send('POST', '/v1/auth/recover', { email }, undefined)
  }

  /** Sets a new password with the mailed code and signs in to that account on this device. */
  async resetPassword(email: string, code: string, newPassword: string): Promise<User> {
    if (this.session?.user.is_anonymous) await this.flush().catch(() => undefined)
    const answer = (await this.send(
      'POST',
      '/v1/auth/recover/confirm',
      { email, code, new_password: newPassword, device_id: this.deviceId },
      undefined,
    )) as { user: User; session: { access_token: string; refresh_token: string; expires_in: number } }
    await this.switchAccount(answer.user, answer.session, answer.user.id !== this.session?.user.id)
    return answer.user
  }

  /** Signs out: the session is revoked, local data dropped, a fresh anonymous account made. */
  async signOut(): Promise<void> {
    try {
      await this.request('POST', '/v1/auth/signout', {})
    } catch (error) {
      if (!(error instanceof FerryError) || error.retryable) throw error
    }
    await this.forget()
  }

  /** Deletes the account and every row of it on the server, then starts afresh. */
  async deleteAccount(): Promise<void> {
    await this.request('DELETE', '/v1/account', { confirm: 'DELETE' })
    await this.forget()
  }

  private async forget(): Promise<void> {
    this.epoch += 1
    this.stream?.close()
    this.stream = null
    for (const lock of this.locks.values()) lock.stop()
    this.locks.clear()
    await this.dropSynced('signed_out', true)
    this.session = null
    await this.serialized(() => this.commit(new Map([['session', null]])))
    await this.signUpAnonymously()
    this.start()
  }

  private async switchAccount(
    user: User,
    session: { access_token: string; refresh_token: string; expires_in: number },
    reset: boolean,
  ): Promise<void> {
    this.epoch += 1
    this.stream?.close()
    this.stream = null
    await this.storeSession(user, session)
    await this.dropSynced(reset ? 'signed_in' : 'signed_in_kept_device', reset)
    this.start()
    await this.sync().catch(() => undefined)
  }

  private async updateUser(user: User): Promise<void> {
    if (!this.session) return
    this.session = { ...this.session, user }
    await this.serialized(() => this.commit(new Map([['session', this.session]])))
    this.setStatus({})
  }

  // MARK: - Locks

  /**
   * Claims a `device_lock` row. Another device's live lock throws `FerryError`
   * `lock_held` (`details.holder`, `details.heartbeat_age_ms`): ask the user, then claim
   * with `force: true` to take it over.
   */
  async claimLock(table: string, key: string, options: { force?: boolean; heartbeatMs?: number } = {}): Promise<HeldLock> {
    const answer = (await this.request(
      'POST',
      `/v1/locks/${encodeURIComponent(table)}/${encodeURIComponent(key)}/claim`,
      { force: options.force === true },
    )) as { holder: string }
    this.locks.get(`${table}\u0000${key}`)?.stop()
    const lock = new HeldLock(this, table, key, answer.holder, options.heartbeatMs ?? 10_000)
    this.locks.set(`${table}\u0000${key}`, lock)
    this.kick()
    return lock
  }

  private checkLocks(tables: string[]): void {
    for (const lock of this.locks.values()) {
      if (!tables.includes(lock.table) || lock.lost) continue
      for (const row of this.serverByTable.get(lock.table)?.values() ?? []) {
        const keyColumn = this.keyColumns(lock.table)[0]
        if (String(row[keyColumn]) === lock.key && '_lock_holder' in row && row._lock_holder !== this.deviceId) {
          lock.markLost((row._lock_holder as string | null) ?? null)
        }
      }
    }
  }

  // MARK: - The cue stream

  private openStream(): void {
    if (this.closed || this.stream || !this.session) return
    const WS = this.options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket
    const kind = this.options.stream ?? (WS ? 'websocket' : 'sse')
    if (kind === 'none') return
    const epoch = this.epoch
    let heartbeat = 25_000
    let watchdog: ReturnType<typeof setTimeout> | null = null
    let renewal: ReturnType<typeof setTimeout> | null = null
    let ended = false
    const alive = () => {
      if (watchdog) clearTimeout(watchdog)
      watchdog = setTimeout(() => end('silent'), heartbeat * 2 + 5_000)
    }
    const handle: { close(): void; ws?: WebSocketLike; abort?: AbortController } = {
      close: () => {
        ended = true
        if (watchdog) clearTimeout(watchdog)
        if (renewal) clearTimeout(renewal)
        handle.ws?.close(1000)
        handle.abort?.abort()
      },
    }
    const end = (why: string | number) => {
      if (ended) return
      this.options.log?.(`ferry: ${kind} stream ended (${why})`)
      handle.close()
      if (this.renewStream === renew) this.renewStream = null
      if (this.stream === handle) this.stream = null
      this.setStatus({ connected: false })
      if (why === 4003 || why === 4004 || epoch !== this.epoch) {
        if (why === 4003 || why === 4004) this.lostSession(why === 4003 ? 'session_revoked' : 'account_deleted')
        return
      }
      this.scheduleReconnect(why === 'renew' ? 0 : undefined)
    }
    const onMessage = (text: string) => {
      alive()
      let message: { type?: string; tables?: string[]; origin?: string | null; heartbeat_ms?: number; in_ms?: number }
      try {
        message = JSON.parse(text)
      } catch {
        return
      }
      this.options.log?.(`ferry: ${kind} stream: ${message.type}`)
      if (message.type === 'hello') {
        heartbeat = message.heartbeat_ms ?? heartbeat
        this.streamAttempts = 0
        this.setStatus({ connected: true })
        this.kick() // cues sent while away are not replayed
        alive()
      } else if (message.type === 'cue') {
        this.kick()
      } else if (message.type === 'token_expiring') {
        // Renew before the end: a refresh (ours, or one that came first) hands the stream
        // the new token: WebSocket in band, SSE by reconnecting (a pull follows its hello).
        warned = true
        if (this.session && this.session.access_token !== streamToken) return renew()
        const inMs = message.in_ms ?? 0
        if (renewal) clearTimeout(renewal)
        renewal = setTimeout(() => void this.refresh(true).catch(() => undefined), Math.max(0, Math.min(inMs / 2, inMs - 20_000)))
      } else if (message.type === 'closed') {
        end((message as { code?: number }).code ?? 'closed')
      }
    }
    this.stream = handle
    this.streamsOpened += 1
    this.options.log?.(`ferry: opening a ${kind} stream`)
    const token = this.session.access_token
    let streamToken = token
    let warned = false
    const renew = () => {
      if (ended || !this.session || this.session.access_token === streamToken) return
      if (handle.ws) {
        if (handle.ws.readyState !== 1) return
        streamToken = this.session.access_token
        handle.ws.send(JSON.stringify({ type: 'auth', access_token: streamToken }))
        if (renewal) clearTimeout(renewal)
      } else if (warned) end('renew')
    }
    this.renewStream = renew
    const base = this.options.url.replace(/\/$/, '')
    if (kind === 'websocket' && WS) {
      const ws = new WS(`${base.replace(/^http/, 'ws')}/v1/stream?access_token=${encodeURIComponent(token)}`)
      handle.ws = ws
      ws.on?.('ping', alive)
      ws.onopen = () => alive()
      ws.onmessage = (event) => onMessage(String(event.data))
      ws.onclose = (event) => end(event.code === 4001 ? 'expired' : event.code)
      ws.onerror = () => end('error')
    } else {
      const abort = new AbortController()
      handle.abort = abort
      void (async () => {
        try {
          const response = await this.fetcher(`${base}/v1/events`, {
            headers: { Accept: 'text/event-stream', Authorization: `Bearer ${token}` },
            signal: abort.signal,
          })
          if (response.status !== 200 || !response.body) {
            if (response.status === 401) await this.refresh(true).catch(() => undefined)
            return end(response.status)
          }
          alive()
          const reader = response.body.getReader()
          const decoder = new TextDecoder()
          let buffer = ''
          let data = ''
          for (;;) {
            const { value, done } = await reader.read()
            if (done) break
            buffer += decoder.decode(value, { stream: true })
            let newline: number
            while ((newline = buffer.indexOf('\n')) >= 0) {
              const line = buffer.slice(0, newline).replace(/\r$/, '')
              buffer = buffer.slice(newline + 1)
              if (line === '') {
                if (data) onMessage(data)
                data = ''
              } else if (line.startsWith(':')) alive()
              else if (line.startsWith('data:')) data += line.slice(5).replace(/^ /, '')
            }
            if (buffer.length > 65_536) buffer = ''
          }
          end('eof')
        } catch {
          end('error')
        }
      })()
    }
  }

  private scheduleReconnect(delay?: number): void {
    if (this.closed || this.reconnectTimer) return
    this.streamAttempts += 1
    const wait = delay ?? this.backoff(this.streamAttempts)
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null
      this.openStream()
    }, wait)
  }

  private reopenStream(): void {
    this.stream?.close()
    this.stream = null
    this.openStream()
  }

  // MARK: - Observers

  emit(event: FerryEvent): void {
    for (const observer of this.eventObservers) observer(event)
  }

  private notifyTables(tables: string[]): void {
    for (const table of new Set(tables)) {
      const observers = this.tableObservers.get(table)
      if (!observers || observers.size === 0) continue
      const rows = this.rows(table)
      for (const observer of observers) observer(rows)
    }
    this.setStatus({})
  }

  private setStatus(update: Partial<Status>): void {
    this.statusValue = { ...this.statusValue, ...update }
    const status = this.status
    for (const observer of this.statusObservers) observer(status)
  }
}
