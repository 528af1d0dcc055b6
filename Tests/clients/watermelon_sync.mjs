#!/usr/bin/env node
// Two devices of one user syncing a WatermelonDB-style local database through a
// WatermelonDB sync backend, written from WatermelonDB's documentation and the
// behaviour of its sync code (docs-website/docs/docs/Sync/Backend.md and Frontend.md,
// src/sync/impl/*, src/RawRecord in Nozbe/WatermelonDB), and from the backend's
// published protocol for accounts; nothing of the backend's own code.
//
// Usage: node watermelon_sync.mjs BASE_URL   (Node 18 or later: fetch is built in)
//
// The local database keeps raw records with _status and _changed as WatermelonDB does,
// and synchronize() runs WatermelonDB's steps: pull (lastPulledAt kept as text and read
// back with parseInt(...) || null, a migration sync when the schema version moved), apply
// with its per-column merge (local changes win), then push every local change (full raws
// with _status and _changed, every table present) and mark what was pushed as synced,
// except records the backend rejected. The app's glue is the one the backend's docs
// show: fetch with a bearer token, sendCreatedAsUpdated, and synchronize() tried again
// once when it fails (a push refused because of a conflict pulls again first).
//
// The walk: phone signs up anonymously, links an email, creates tasks; laptop signs in
// on its own device and does a first sync (its raw answer checked as turbo login reads
// it); offline edits on both (different and same columns, a delete on one and an edit
// on the other); a conflict (phone pushes between laptop's pull and push: 409, then the
// retry); a record the backend rejects, kept unsynced until the user deletes it; laptop
// upgrades its schema and does a migration sync. It ends with both devices in step,
// prints FINAL and each device's records as JSON, and exits 0; any mismatch exits 1
// naming the step.

const base = process.argv[2]
if (!base) {
  console.error('usage: node watermelon_sync.mjs BASE_URL')
  process.exit(2)
}

let currentStep = 'start'
function step(name) {
  currentStep = name
  console.log(`- ${name}`)
}
function check(condition, message, detail) {
  if (!condition) {
    throw new Error(`step '${currentStep}': ${message}${detail === undefined ? '' : `\n  ${JSON.stringify(detail)}`}`)
  }
}

// MARK: - Schema and raw records (src/Schema, src/RawRecord)

const tasksV1 = {
  name: 'tasks',
  columns: [
    { name: 'title', type: 'string' },
    { name: 'position', type: 'number' },
    { name: 'parent_id', type: 'string', isOptional: true },
    { name: 'updated_at', type: 'number' },
  ],
}
const tasksV2 = { name: 'tasks', columns: [...tasksV1.columns, { name: 'metadata', type: 'string' }] }
// A table only the app has: WatermelonDB pushes it too, always with three empty arrays.
const drafts = { name: 'drafts', columns: [{ name: 'text', type: 'string' }] }
const schemaV1 = { version: 1, tables: { tasks: tasksV1, drafts } }
const schemaV2 = { version: 2, tables: { tasks: tasksV2, drafts } }
// The migration from 1 to 2 (an add_columns step), as getSyncChanges reports it.
const migrationsTo2 = { from: 1, tables: [], columns: [{ table: 'tasks', columns: ['metadata'] }] }

const isValidNumber = (value) => typeof value === 'number' && value === value && value !== Infinity && value !== -Infinity

function setRaw(raw, key, value, column) {
  if (column.type === 'string') {
    raw[key] = typeof value === 'string' ? value : column.isOptional ? null : ''
  } else if (column.type === 'boolean') {
    if (typeof value === 'boolean') raw[key] = value
    else if (value === 1 || value === 0) raw[key] = Boolean(value)
    else raw[key] = column.isOptional ? null : false
  } else {
    raw[key] = isValidNumber(value) ? value || 0 : column.isOptional ? null : 0
  }
}

let idCounter = 0
function randomId() {
  idCounter += 1
  const letters = 'abcdefghijklmnopqrstuvwxyz0123456789'
  let id = ''
  for (let i = 0; i < 12; i += 1) id += letters[Math.floor(Math.random() * letters.length)]
  return id + String(idCounter).padStart(4, '0')
}

const validStatus = (status) => ['created', 'updated', 'deleted', 'synced'].includes(status)

function sanitizedRaw(dirty, tableSchema) {
  const raw = {}
  if (typeof dirty.id === 'string') {
    raw.id = dirty.id
    raw._status = validStatus(dirty._status) ? dirty._status : 'created'
    raw._changed = typeof dirty._changed === 'string' ? dirty._changed : ''
  } else {
    raw.id = randomId()
    raw._status = 'created'
    raw._changed = ''
  }
  for (const column of tableSchema.columns) {
    const value = Object.prototype.hasOwnProperty.call(dirty, column.name) ? dirty[column.name] : null
    setRaw(raw, column.name, value, column)
  }
  return raw
}

function addToRawSet(rawSet, value) {
  const set = new Set(rawSet ? rawSet.split(',') : [])
  set.add(value)
  return Array.from(set).join(',')
}

function areRecordsEqual(left, right) {
  const keys = Object.keys(left)
  if (keys.length !== Object.keys(right).length) return false
  return keys.every((key) => left[key] === right[key])
}

// MARK: - The local database

class LocalDatabase {
  constructor(name, schema) {
    this.name = name
    this.schema = schema
    this.tables = Object.fromEntries(Object.keys(schema.tables).map((table) => [table, new Map()]))
    this.local = new Map() // adapter.setLocal / getLocal: text values
    this.loggedErrors = []
  }

  logError(message) {
    this.loggedErrors.push(message)
    console.log(`  [${this.name}] WatermelonDB would log: ${message}`)
  }

  // Model.create: a new record, _status 'created', _changed ''.
  create(table, fields) {
    const raw = sanitizedRaw({ id: randomId(), ...fields }, this.schema.tables[table])
    raw._status = 'created'
    raw._changed = ''
    if ('updated_at' in raw) raw.updated_at = Date.now()
    this.tables[table].set(raw.id, raw)
    return raw.id
  }

  // Model.update: each set column is marked in _changed; updated_at too (createUpdateTracking).
  update(table, id, fields) {
    const raw = this.tables[table].get(id)
    check(raw && raw._status !== 'deleted', `${this.name}: no record ${table}#${id} to update`)
    const schema = this.schema.tables[table]
    const changes = { ...fields }
    if (schema.columns.some((c) => c.name === 'updated_at')) changes.updated_at = Date.now()
    for (const [key, value] of Object.entries(changes)) {
      setRaw(raw, key, value, schema.columns.find((c) => c.name === key))
      raw._changed = addToRawSet(raw._changed, key)
      if (raw._status !== 'created') raw._status = 'updated'
    }
  }

  // Model.markAsDeleted: kept as 'deleted' until a push of its id is done.
  markAsDeleted(table, id) {
    this.tables[table].get(id)._status = 'deleted'
  }

  // What the app sees: records not marked as deleted.
  visible(table) {
    return [...this.tables[table].values()].filter((raw) => raw._status !== 'deleted')
  }

  // A schema migration (add_columns): existing records get the column's empty value.
  migrate(schema) {
    this.schema = schema
    for (const [table, map] of Object.entries(this.tables)) {
      for (const raw of map.values()) {
        for (const column of schema.tables[table].columns) {
          if (!(column.name in raw)) setRaw(raw, column.name, null, column)
        }
      }
    }
  }
}

// MARK: - synchronize() (src/sync/impl)

const lastPulledAtKey = '__watermelon_last_pulled_at'
const lastPulledSchemaVersionKey = '__watermelon_last_pulled_schema_version'

function getLastPulledAt(db) {
  return parseInt(db.local.get(lastPulledAtKey), 10) || null
}

function setLastPulledAt(db, timestamp) {
  const previous = getLastPulledAt(db) || 0
  if (timestamp < previous) {
    db.logError(`Pull has finished and received server time ${timestamp} — but previous pulled-at time was greater - ${previous}. This is most likely server bug.`)
  }
  db.local.set(lastPulledAtKey, `${timestamp}`)
}

function getMigrationInfo(db, lastPulledAt, migrationsEnabledAtVersion, migrationSyncChanges) {
  const isFirstSync = !lastPulledAt
  const schemaVersion = db.schema.version
  const lastPulledSchemaVersion = parseInt(db.local.get(lastPulledSchemaVersionKey), 10) || null
  const migrateFrom = lastPulledSchemaVersion || migrationsEnabledAtVersion || 0
  const shouldMigrate = !!migrationsEnabledAtVersion && migrateFrom < schemaVersion && !isFirstSync
  return {
    schemaVersion,
    migration: shouldMigrate ? migrationSyncChanges(migrateFrom, schemaVersion) : null,
    shouldSaveSchemaVersion: shouldMigrate || isFirstSync,
  }
}

function validateRemoteRaw(raw) {
  check(
    raw && typeof raw === 'object' && 'id' in raw && !('_status' in raw || '_changed' in raw),
    "[Sync] Invalid raw record supplied to Sync. Records must be objects, must have an 'id' field, and must NOT have a '_status' or '_changed' fields",
    raw,
  )
  check(!Object.prototype.hasOwnProperty.call(raw, '__proto__'), 'Malicious dirtyRaw detected - contains a __proto__ key')
}

// helpers.js resolveConflict: server's version, but every column changed locally keeps its local value.
function resolveConflict(local, remote) {
  if (local._status === 'deleted') return local
  const resolved = { ...local, ...remote, id: local.id, _status: local._status, _changed: local._changed }
  for (const column of local._changed.split(',')) {
    if (column) resolved[column] = local[column]
  }
  return resolved
}

function applyRemoteChanges(db, remoteChanges, { sendCreatedAsUpdated }) {
  for (const [table, changes] of Object.entries(remoteChanges)) {
    const records = db.tables[table]
    if (!records) {
      console.log(`  [${db.name}] skipping unknown collection ${table} (forward compatibility)`)
      continue
    }
    const schema = db.schema.tables[table]
    const { created, updated, deleted } = changes
    if (sendCreatedAsUpdated && created.length) {
      db.logError("[Sync] 'sendCreatedAsUpdated' option is enabled, and yet server sends some records as 'created'")
    }
    const create = (raw) => records.set(raw.id, sanitizedRaw({ ...raw, _status: 'synced', _changed: '' }, schema))
    const update = (local, remote) => {
      // requiresUpdate: a synced record equal to the remote one is left alone.
      const resolved = sanitizedRaw(resolveConflict(local, remote), schema)
      records.set(local.id, resolved)
    }
    for (const raw of created) {
      validateRemoteRaw(raw)
      const local = records.get(raw.id)
      if (local && local._status !== 'deleted') {
        db.logError(`[Sync] Server wants client to create record ${table}#${raw.id}, but it already exists locally.`)
        update(local, raw)
      } else {
        create(raw)
      }
    }
    for (const raw of updated) {
      validateRemoteRaw(raw)
      const local = records.get(raw.id)
      if (local && local._status === 'deleted') continue // the local deletion is pushed later
      if (local) {
        update(local, raw)
      } else {
        if (!sendCreatedAsUpdated) {
          db.logError(`[Sync] Server wants client to update record ${table}#${raw.id}, but it doesn't exist locally.`)
        }
        create(raw)
      }
    }
    // Deleted on the server: destroyed here, locally changed or not.
    for (const id of deleted) records.delete(id)
  }
}

function fetchLocalChanges(db) {
  const changes = {}
  for (const [table, records] of Object.entries(db.tables)) {
    const set = { created: [], updated: [], deleted: [] }
    for (const raw of records.values()) {
      if (raw._status === 'created') set.created.push({ ...raw })
      else if (raw._status === 'updated') set.updated.push({ ...raw })
      else if (raw._status === 'deleted') set.deleted.push(raw.id)
    }
    changes[table] = set
  }
  return changes
}

const isChangeSetEmpty = (changes) =>
  Object.values(changes).every(({ created, updated, deleted }) => created.length + updated.length + deleted.length === 0)

function markLocalChangesAsSynced(db, changes, rejectedIds = {}) {
  for (const [table, { created, updated, deleted }] of Object.entries(changes)) {
    const rejected = new Set(rejectedIds[table] || [])
    const records = db.tables[table]
    for (const pushed of [...created, ...updated]) {
      const record = records.get(pushed.id)
      if (record && areRecordsEqual(record, pushed) && !rejected.has(pushed.id)) {
        record._status = 'synced'
        record._changed = ''
      }
    }
    for (const id of deleted) {
      if (!rejected.has(id) && records.get(id)?._status === 'deleted') records.delete(id)
    }
  }
}

async function synchronize(db, { pullChanges, pushChanges, sendCreatedAsUpdated, migrationsEnabledAtVersion, beforePush }) {
  const lastPulledAt = getLastPulledAt(db)
  const { schemaVersion, migration, shouldSaveSchemaVersion } = getMigrationInfo(
    db, lastPulledAt, migrationsEnabledAtVersion, () => migrationsTo2)
  const pullResult = await pullChanges({ lastPulledAt, schemaVersion, migration })
  const newLastPulledAt = pullResult.timestamp
  check(lastPulledAt === getLastPulledAt(db), '[Sync] Concurrent synchronization is not allowed.')
  check(
    typeof newLastPulledAt === 'number' && newLastPulledAt > 0,
    `pullChanges() returned invalid timestamp ${newLastPulledAt}. timestamp must be a non-zero number`,
  )
  // One local write: the changes and the new lastPulledAt together.
  applyRemoteChanges(db, pullResult.changes, { sendCreatedAsUpdated })
  setLastPulledAt(db, newLastPulledAt)
  if (shouldSaveSchemaVersion) db.local.set(lastPulledSchemaVersionKey, `${schemaVersion}`)

  if (beforePush) await beforePush()
  const localChanges = fetchLocalChanges(db)
  if (!isChangeSetEmpty(localChanges)) {
    const pushResult = (await pushChanges({ changes: localChanges, lastPulledAt: newLastPulledAt })) || {}
    markLocalChangesAsSynced(db, localChanges, pushResult.experimentalRejectedIds)
    return pushResult
  }
  return {}
}

// MARK: - The app's glue (the backend's docs)

async function api(method, path, { token, body } = {}) {
  const response = await fetch(base + path, {
    method,
    headers: { 'Content-Type': 'application/json', ...(token ? { Authorization: `Bearer ${token}` } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await response.text()
  return { status: response.status, text, json: text ? JSON.parse(text) : null }
}

class SyncError extends Error {
  constructor(status, body) {
    super(`${status} ${body}`)
    this.status = status
    this.code = (() => {
      try {
        return JSON.parse(body).error.code
      } catch {
        return undefined
      }
    })()
  }
}

class Device {
  constructor(name, schema) {
    this.name = name
    this.db = new LocalDatabase(name, schema)
    this.deviceId = crypto.randomUUID()
    this.conflicts = 0
    this.rawPulls = []
  }

  async sync({ beforePush } = {}) {
    const pullChanges = async ({ lastPulledAt, schemaVersion, migration }) => {
      const query = `last_pulled_at=${lastPulledAt}&schema_version=${schemaVersion}&migration=${encodeURIComponent(JSON.stringify(migration))}`
      const response = await fetch(`${base}/v1/watermelon/sync?${query}`, {
        headers: { Authorization: `Bearer ${this.token}` },
      })
      const text = await response.text()
      if (!response.ok) throw new SyncError(response.status, text)
      this.rawPulls.push({ lastPulledAt, migration, text })
      const { changes, timestamp } = JSON.parse(text)
      return { changes, timestamp }
    }
    const pushChanges = async ({ changes, lastPulledAt }) => {
      const response = await fetch(`${base}/v1/watermelon/sync?last_pulled_at=${lastPulledAt}`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${this.token}`, 'Content-Type': 'application/json' },
        body: JSON.stringify(changes),
      })
      const text = await response.text()
      if (!response.ok) throw new SyncError(response.status, text)
      return JSON.parse(text)
    }
    const run = (hook) =>
      synchronize(this.db, {
        pullChanges, pushChanges, sendCreatedAsUpdated: true, migrationsEnabledAtVersion: 1, beforePush: hook,
      })
    try {
      return await run(beforePush)
    } catch (error) {
      if (!(error instanceof SyncError) || error.code !== 'conflict') throw error
      // Retry once: the pull brings the server's version, the local changes win per column.
      this.conflicts += 1
      console.log(`  [${this.name}] push refused (409 conflict); pulling and pushing again`)
      return await run()
    }
  }
}

// Turbo login's reader (native/shared/Database-turboSync.cpp), as rules on the raw text.
function checkTurboJson(text) {
  const answer = JSON.parse(text)
  check(answer && typeof answer === 'object' && !Array.isArray(answer), 'turbo: not an object')
  check(typeof answer.timestamp === 'number', 'turbo: no timestamp')
  for (const [table, set] of Object.entries(answer.changes)) {
    for (const key of Object.keys(set)) check(['created', 'updated', 'deleted'].includes(key), 'turbo: bad changeset field', key)
    check(set.deleted.length === 0, 'turbo: expected deleted field to be empty', table)
    const ids = [...set.created, ...set.updated].map((raw) => raw.id)
    check(ids.every((id) => typeof id === 'string'), 'turbo: ids are strings', table)
    check(new Set(ids).size === ids.length, 'turbo: an id twice is a UNIQUE failure', table)
  }
}

// MARK: - The walk

const synced = (device, table = 'tasks') => device.db.visible(table).filter((raw) => raw._status === 'synced')
const byId = (device, id) => device.db.tables.tasks.get(id)
function sameRecords(left, right) {
  const strip = (raws) =>
    JSON.stringify(raws.map(({ _status, _changed, ...rest }) => rest).sort((a, b) => (a.id < b.id ? -1 : 1)))
  return strip(left) === strip(right)
}

async function main() {
  const email = `watermelon-${crypto.randomUUID()}@example.com`
  const password = 'correct horse battery'
  const phone = new Device('phone', schemaV2)
  const laptop = new Device('laptop', schemaV1)

  step('phone: anonymous sign-up on first launch, then an email')
  let response = await api('POST', '/v1/auth/anonymous', { body: { device_id: phone.deviceId } })
  check(response.status === 201, 'anonymous sign-up', response.text)
  phone.token = response.json.session.access_token
  response = await api('POST', '/v1/auth/link', { token: phone.token, body: { email, password } })
  check(response.status === 200, 'link', response.text)

  step('phone: tasks made offline, then the first sync')
  const a = phone.db.create('tasks', { title: 'milk', position: 1 })
  const b = phone.db.create('tasks', { title: 'eggs', position: 2 })
  const c = phone.db.create('tasks', { title: 'bread', position: 3, parent_id: a })
  phone.db.update('tasks', b, { metadata: '{"due":"2026-01-01"}' })
  await phone.sync()
  check(synced(phone).length === 3, 'every task synced', phone.db.visible('tasks'))
  // Its own push comes back with the server's clock.
  await phone.sync()
  check(byId(phone, b).metadata === '{"due": "2026-01-01"}', 'metadata as the server keeps the JSON', byId(phone, b))

  step('laptop: signs in on its own device; a first sync')
  response = await api('POST', '/v1/auth/signin', { body: { email, password, device_id: laptop.deviceId } })
  check(response.status === 200 && response.json.reset === false, 'sign-in', response.text)
  laptop.token = response.json.session.access_token
  await laptop.sync()
  checkTurboJson(laptop.rawPulls[0].text)
  check(synced(laptop).length === 3, 'the first sync brings every task', laptop.db.visible('tasks'))
  check(!('metadata' in byId(laptop, b)), 'a column the app does not have yet is dropped', byId(laptop, b))
  check(byId(laptop, c).parent_id === a, 'parent_id as pushed', byId(laptop, c))

  step('offline edits on both: different columns, the same column, a delete against an edit')
  phone.db.update('tasks', a, { title: 'oat milk' })
  laptop.db.update('tasks', a, { position: 10 })
  phone.db.update('tasks', b, { title: 'eggs (phone)' })
  laptop.db.update('tasks', b, { title: 'eggs (laptop)' })
  phone.db.markAsDeleted('tasks', c)
  laptop.db.update('tasks', c, { title: 'rye bread' })
  const d = laptop.db.create('tasks', { title: 'butter', position: 4 })
  await phone.sync()
  check(phone.conflicts === 0, 'the phone pushes right after its pull: no conflict')

  step("laptop: its pull merges the phone's changes, its own columns win; the delete wins over its edit")
  await laptop.sync()
  check(byId(laptop, a).title === 'oat milk' && byId(laptop, a).position === 10, 'per-column merge', byId(laptop, a))
  check(byId(laptop, b).title === 'eggs (laptop)', 'a column changed locally keeps the local value', byId(laptop, b))
  check(byId(laptop, c) === undefined, 'deleted on the server: destroyed here, edited or not')
  check(laptop.conflicts === 0, 'no conflict')

  step('a conflict: the phone pushes between the laptop pull and push; 409, then pull and push again')
  await phone.sync()
  laptop.db.update('tasks', d, { title: 'salted butter' })
  await laptop.sync({
    beforePush: async () => {
      phone.db.update('tasks', d, { position: 40 })
      await phone.sync()
    },
  })
  check(laptop.conflicts === 1, 'one 409 conflict, resolved by the retry', laptop.conflicts)
  check(byId(laptop, d).title === 'salted butter' && byId(laptop, d).position === 40, 'both changes kept', byId(laptop, d))
  check(byId(laptop, d)._status === 'synced', 'pushed on the retry', byId(laptop, d))

  step('a record the backend rejects stays unsynced, and goes once the user deletes it')
  const root = 'root'
  laptop.db.tables.tasks.set(root, sanitizedRaw({ id: root, title: 'not allowed', _status: 'created', _changed: '' }, tasksV1))
  let pushResult = await laptop.sync()
  check(JSON.stringify(pushResult.experimentalRejectedIds) === '{"tasks":["root"]}', 'rejected by id', pushResult)
  check(byId(laptop, root)._status === 'created', 'a rejected record stays unsynced')
  pushResult = await laptop.sync()
  check(JSON.stringify(pushResult.experimentalRejectedIds) === '{"tasks":["root"]}', 'pushed and rejected again', pushResult)
  laptop.db.markAsDeleted('tasks', root)
  pushResult = await laptop.sync()
  check(!pushResult.experimentalRejectedIds && byId(laptop, root) === undefined, 'its delete is a no-op, then synced', pushResult)

  step('deletes reach the other device')
  phone.db.markAsDeleted('tasks', a)
  await phone.sync()
  await laptop.sync()
  check(byId(laptop, a) === undefined, 'deleted on the laptop too')

  step('laptop upgrades its app: schema 2 adds tasks.metadata, and a migration sync fills it')
  laptop.db.migrate(schemaV2)
  check(byId(laptop, b).metadata === '', 'the new column starts empty locally')
  const before = laptop.rawPulls.length
  await laptop.sync()
  const migrationPull = laptop.rawPulls[before]
  check(JSON.stringify(migrationPull.migration) === JSON.stringify(migrationsTo2), 'the pull named the migration', migrationPull)
  check(JSON.parse(migrationPull.text).changes.tasks.updated.length === 2, 'every task came whole', migrationPull.text)
  check(byId(laptop, b).metadata === '{"due": "2026-01-01"}', 'metadata is there now', byId(laptop, b))
  check(laptop.db.local.get(lastPulledSchemaVersionKey) === '2', 'the schema version is saved')

  step('both in step')
  for (let round = 0; round < 2; round += 1) {
    await phone.sync()
    await laptop.sync()
  }
  for (const device of [phone, laptop]) {
    const unsynced = [...device.db.tables.tasks.values()].filter((raw) => raw._status !== 'synced')
    check(unsynced.length === 0, `${device.name}: nothing left to push`, unsynced)
    check(device.db.loggedErrors.length === 0, `${device.name}: nothing WatermelonDB would log as an error`, device.db.loggedErrors)
    const stamps = device.rawPulls.map((pull) => JSON.parse(pull.text).timestamp)
    check(stamps.every((n, i) => i === 0 || n > stamps[i - 1]), `${device.name}: timestamps only grow`, stamps)
  }
  check(sameRecords(phone.db.visible('tasks'), laptop.db.visible('tasks')), 'the two devices hold the same records', {
    phone: phone.db.visible('tasks'),
    laptop: laptop.db.visible('tasks'),
  })
  console.log('FINAL ' + JSON.stringify({
    phone: phone.db.visible('tasks').map(({ _status, _changed, ...rest }) => rest),
    laptop: laptop.db.visible('tasks').map(({ _status, _changed, ...rest }) => rest),
  }))
  console.log('two devices synced through every step as WatermelonDB would')
}

main().catch((error) => {
  console.log(`FAILED: ${error.stack || error}`)
  process.exit(1)
})
