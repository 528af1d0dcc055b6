// The flows of docs/CLIENT-JS.md against a real `ferry serve` (FERRY_URL).
import assert from 'node:assert/strict'
import { after, test } from 'node:test'
import { FerryError, MemoryStorage } from '../dist/index.js'
import { api, closeAll, device, email, mailedCode, mailsTo, serverRows, until } from './support.mjs'

after(closeAll)

test('first launch signs up anonymously; a restart keeps the session and the rows', async () => {
  const storage = new MemoryStorage()
  const first = await device({ storage })
  assert.equal(first.user.is_anonymous, true)
  await first.enqueue('tasks', 'upsert', { id: 't1', title: 'milk' })
  assert.equal(first.status.pending, 1)
  await first.flush()
  first.close()
  const again = await device({ storage })
  assert.equal(again.user.id, first.user.id)
  assert.equal(again.device, first.device)
  assert.equal(again.row('tasks', { id: 't1' }).title, 'milk')
  const who = await again.request('GET', '/v1/auth/user')
  assert.equal(who.user.id, first.user.id)
  again.close()
})

test('enqueue writes the row and its mutation at once; the drain applies it and empties the outbox', async () => {
  const client = await device({ autoStart: false })
  const seen = []
  client.observe('tasks', (rows) => seen.push(rows.length))
  await client.enqueue('tasks', 'upsert', { id: 'a', title: 'one', position: 1 })
  await client.enqueue('tasks', 'upsert', { id: 'a', position: 2 })
  assert.deepEqual(client.pending.map((m) => m.id), [1, 2])
  assert.equal(client.row('tasks', { id: 'a' }).position, 2)
  assert.equal(client.row('tasks', { id: 'a' }).title, 'one')
  await client.sync()
  assert.equal(client.status.pending, 0)
  const rows = await serverRows(client, 'tasks')
  assert.equal(rows.length, 1)
  assert.equal(rows[0].title, 'one')
  assert.equal(rows[0].position, 2)
  assert.ok(client.row('tasks', { id: 'a' }).updated_at, 'the merged row is the server’s')
  assert.ok(seen.length >= 3)
  client.close()
})

test('a rejected write is reported and its optimistic row reverted; the rest of the batch applies', async () => {
  const client = await device({ autoStart: false })
  const events = []
  client.onEvent((event) => events.push(event))
  await client.enqueue('tasks', 'upsert', { id: 'keep', title: 'kept' })
  await client.enqueue('subscriptions', 'upsert', { plan: 'pro' })
  await client.enqueue('tasks', 'upsert', { id: 'bad', title: 'x', metadata: [1] })
  await client.enqueue('tasks', 'upsert', { id: 'after', title: 'after' })
  assert.equal(client.rows('subscriptions').length, 1)
  await client.sync()
  assert.equal(client.status.pending, 0)
  const codes = events.filter((e) => e.type === 'rejected').map((e) => e.code).sort()
  assert.deepEqual(codes, ['constraint_violation', 'read_only'])
  assert.equal(client.rows('subscriptions').length, 0, 'the read-only row was put back')
  assert.equal(client.row('tasks', { id: 'bad' }), undefined)
  assert.deepEqual((await serverRows(client, 'tasks')).map((r) => r.id).sort(), ['after', 'keep'])
  client.close()
})

test('413 halves the batch until it fits; the whole outbox drains', async () => {
  const client = await device({ autoStart: false, batchBytes: 8 * 1024 * 1024 })
  const big = 'x'.repeat(150 * 1024)
  for (let i = 0; i < 8; i++) await client.enqueue('tasks', 'upsert', { id: `big${i}`, title: big })
  await client.flush(60_000)
  assert.equal((await serverRows(client, 'tasks')).length, 8)
  client.close()
})

test('an unreadable cursor drops the synced rows, keeps the outbox, and loads afresh', async () => {
  const storage = new MemoryStorage()
  const client = await device({ storage, autoStart: false })
  await client.enqueue('tasks', 'upsert', { id: 'c1', title: 'server' })
  await client.sync()
  client.close()
  await storage.commit(new Map([['cursor', 'not-a-cursor'], ['r:tasks:["ghost"]', { id: 'ghost' }], ['s:tasks:["ghost"]', { id: 'ghost' }]]))
  const again = await device({ storage, autoStart: false })
  const events = []
  again.onEvent((e) => events.push(e))
  await again.enqueue('tasks', 'upsert', { id: 'c2', title: 'pending' })
  await again.sync()
  assert.ok(events.some((e) => e.type === 'reset' && e.reason === 'invalid_cursor'))
  assert.deepEqual(again.rows('tasks').map((r) => r.id).sort(), ['c1', 'c2'])
  again.close()
})

test('link, sign out, sign in: the resolution choice with keep_device and keep_cloud', async () => {
  const address = email()
  const phone = await device({ autoStart: false })
  await phone.enqueue('tasks', 'upsert', { id: 'p1', title: 'from phone' })
  await phone.sync()
  const linked = await phone.link(address, 'correct horse 1')
  assert.equal(linked.is_anonymous, false)
  assert.equal(linked.id, phone.user.id)
  assert.equal(phone.rows('tasks').length, 1)

  // A second device with local rows: the server asks which to keep.
  const laptop = await device({ autoStart: false })
  await laptop.enqueue('tasks', 'upsert', { id: 'l1', title: 'from laptop' })
  await assert.rejects(laptop.signIn(address, 'correct horse 1'), (error) => {
    assert.ok(error instanceof FerryError)
    assert.equal(error.code, 'resolution_required')
    assert.equal(error.details.device_rows, 1)
    assert.equal(error.details.cloud_rows, 1)
    return true
  })
  assert.equal(laptop.status.pending, 0, 'the outbox was flushed before the sign-in')
  await laptop.signIn(address, 'correct horse 1', { resolve: 'keep_device' })
  assert.equal(laptop.user.id, phone.user.id)
  assert.deepEqual(laptop.rows('tasks').map((r) => r.id), ['l1'])
  await phone.sync()
  assert.deepEqual(phone.rows('tasks').map((r) => r.id), ['l1'], 'the account’s old rows became tombstones')

  // keep_cloud: the device's rows go, the account's come.
  const tablet = await device({ autoStart: false })
  await tablet.enqueue('tasks', 'upsert', { id: 'x1', title: 'dropped' })
  await assert.rejects(tablet.signIn(address, 'correct horse 1'), { code: 'resolution_required' })
  await tablet.signIn(address, 'correct horse 1', { resolve: 'keep_cloud' })
  assert.deepEqual(tablet.rows('tasks').map((r) => r.id), ['l1'])

  // Sign-out: a fresh anonymous account, nothing of the old one left here.
  const before = tablet.user.id
  await tablet.signOut()
  assert.notEqual(tablet.user.id, before)
  assert.equal(tablet.user.is_anonymous, true)
  assert.equal(tablet.rows('tasks').length, 0)
  await assert.rejects(tablet.signIn(address, 'wrong password'), { code: 'invalid_credentials' })
  for (const client of [phone, laptop, tablet]) client.close()
})

test('password change keeps this device signed in and revokes the others; reset by a mailed code; delete', async () => {
  const address = email()
  const a = await device({ autoStart: false })
  await a.link(address, 'first password')
  const b = await device({ autoStart: false })
  await b.signIn(address, 'first password')
  await a.changePassword('first password', 'second password')
  await a.sync()
  const events = []
  b.onEvent((e) => events.push(e))
  // Asked of /v1/auth/user, which reads the session in the database: the other routes
  // check a cache that learns of a revocation by a notification, a little later.
  await assert.rejects(b.request('GET', '/v1/auth/user'), { code: 'session_revoked' })
  assert.ok(events.some((e) => e.type === 'session_lost'))
  await assert.rejects(a.changePassword('wrong', 'third password'), { code: 'invalid_credentials' })
  await a.enqueue('tasks', 'upsert', { id: 'kept', title: 'survives the reset' })
  await a.sync()

  // The reset, on a third device, with the code the gateway mailed (JSClientTests' SMTP relay).
  const c = await device({ autoStart: false })
  const mailed = (await mailsTo(address)).length
  await c.requestPasswordReset(address)
  const code = await mailedCode(address, mailed + 1)
  await assert.rejects(c.resetPassword(address, code === 'ZZZZ2345' ? 'ZZZZ2346' : 'ZZZZ2345', 'third password'), {
    code: 'invalid_code',
  })
  const reset = await c.resetPassword(address, code, 'third password')
  assert.equal(reset.id, a.user.id, 'the reset signs in to the account')
  assert.equal(c.user.id, a.user.id)
  assert.equal(c.user.email, address)
  assert.deepEqual(c.rows('tasks').map((r) => r.id), ['kept'], 'the account’s rows loaded on the resetting device')
  // Every other session is revoked: a's, which had just changed the password (asked of
  // /v1/auth/user, as above).
  const aEvents = []
  a.onEvent((e) => aEvents.push(e))
  await assert.rejects(a.request('GET', '/v1/auth/user'), { code: 'session_revoked' })
  assert.ok(aEvents.some((e) => e.type === 'session_lost'))
  // The old password is refused, the new one signs in; the code works once.
  const old = await api('POST', '/v1/auth/signin', null, { email: address, password: 'second password', device_id: a.device })
  assert.equal(old.status, 401)
  assert.equal(old.json.error.code, 'invalid_credentials')
  const fresh = await api('POST', '/v1/auth/signin', null, { email: address, password: 'third password', device_id: a.device })
  assert.equal(fresh.status, 200, JSON.stringify(fresh.json))
  assert.equal(fresh.json.user.id, c.user.id)
  await assert.rejects(c.resetPassword(address, code, 'fourth password'), { code: 'invalid_code' })
  await c.enqueue('tasks', 'upsert', { id: 'after-reset', title: 'written after the reset' })
  await c.sync()
  assert.equal(c.status.pending, 0)

  // Deleting the account: every row goes, and the password no longer signs in.
  const deleted = c.user.id
  await c.deleteAccount()
  assert.notEqual(c.user.id, deleted)
  assert.equal(c.rows('tasks').length, 0)
  const signIn = await api('POST', '/v1/auth/signin', null, { email: address, password: 'third password', device_id: c.device })
  assert.equal(signIn.status, 401)
  for (const client of [a, b, c]) client.close()
})

test('refreshes run one at a time; a lost refresh answer is retried with the same token', async () => {
  let dropNext = true
  const sent = []
  const lossy = async (input, init) => {
    const response = await fetch(input, init)
    if (String(input).endsWith('/v1/auth/refresh')) {
      sent.push(JSON.parse(init.body).refresh_token)
      if (dropNext) {
        dropNext = false
        await response.text()
        throw new TypeError('connection reset (dropped by the test)')
      }
    }
    return response
  }
  const client = await device({ autoStart: false, fetch: lossy })
  await Promise.all([client.refresh(true), client.refresh(true), client.refresh(true)])
  assert.equal(sent.length, 2, `one refresh and one retry: ${sent.length}`)
  assert.equal(sent[0], sent[1], 'the retry sends the same token')
  await client.enqueue('tasks', 'upsert', { id: 'r', title: 'after refresh' })
  await client.sync()
  assert.equal(client.status.pending, 0)
  client.close()
})

test('the lock: claim, held elsewhere, takeover, the old holder learns', async () => {
  const address = email()
  const a = await device({ autoStart: false })
  await a.link(address, 'lock password')
  const b = await device({ autoStart: false })
  await b.signIn(address, 'lock password')
  const events = []
  a.onEvent((e) => events.push(e))
  const lockA = await a.claimLock('active_game', 'current', { heartbeatMs: 200 })
  assert.equal(lockA.holder, a.device)
  await a.enqueue('active_game', 'upsert', { slot: 'current', hints: 1 })
  await a.sync()
  await assert.rejects(b.claimLock('active_game', 'current'), (error) => {
    assert.equal(error.code, 'lock_held')
    assert.equal(error.details.holder, a.device)
    return true
  })
  const lockB = await b.claimLock('active_game', 'current', { force: true, heartbeatMs: 200 })
  assert.equal(lockB.holder, b.device)
  await until(() => events.some((e) => e.type === 'lock_lost'), 10000, 'lock_lost on the old holder')
  const rejected = []
  a.onEvent((e) => e.type === 'rejected' && rejected.push(e))
  await a.enqueue('active_game', 'upsert', { slot: 'current', hints: 5 })
  await a.sync()
  assert.equal(rejected[0]?.code, 'lock_not_held')
  assert.notEqual(a.row('active_game', { slot: 'current' }).hints, 5, 'the refused write was reverted')
  await lockB.release()
  a.close()
  b.close()
})

for (const stream of ['websocket', 'sse']) {
  test(`a cue on the ${stream} stream brings another device's write without a sync call`, async () => {
    const address = email()
    const a = await device({ stream })
    await a.link(address, 'stream password')
    const b = await device({ autoStart: false })
    await b.signIn(address, 'stream password')
    await until(() => a.status.connected, 10000, 'the stream open')
    await b.enqueue('tasks', 'upsert', { id: `cue-${stream}`, title: 'cued' })
    await b.sync()
    await until(() => a.row('tasks', { id: `cue-${stream}` }), 10000, 'the cued row')
    a.close()
    b.close()
  })
}

test('status: pending, connected and last synced', async () => {
  const client = await device({ stream: 'websocket', autoStart: false })
  const statuses = []
  client.onStatus((s) => statuses.push(s))
  await client.enqueue('tasks', 'upsert', { id: 's', title: 's' })
  assert.equal(client.status.pending, 1)
  client.start()
  await until(() => client.status.connected && client.status.pending === 0 && client.status.lastSyncedAt, 10000, 'synced')
  assert.ok(statuses.some((s) => s.pending === 1))
  client.close()
})

test('a mutation is never pushed before its storage commit has finished', async () => {
  // A kill between the push and the commit would leave the server with an id the device
  // forgot, and the device's next mutation reusing it, answered duplicate: lost.
  class HeldStorage extends MemoryStorage {
    held = null
    async commit(change) {
      if (this.held) await this.held
      return super.commit(change)
    }
  }
  const storage = new HeldStorage()
  const pushes = []
  const client = await device({
    storage,
    autoStart: false,
    fetch: (url, init) => {
      if (String(url).endsWith('/v1/push')) pushes.push({ saved: storage.held === null, body: JSON.parse(init.body) })
      return fetch(url, init)
    },
  })
  let release
  storage.held = new Promise((resolve) => (release = resolve))
  const enqueued = client.enqueue('tasks', 'upsert', { id: 'held', title: 'saved first' })
  await new Promise((resolve) => setTimeout(resolve, 20))
  // A sync while the commit is held: its push finds nothing it may send (its pull then
  // waits for the held commit, since commits go one at a time).
  const syncing = client.sync()
  await new Promise((resolve) => setTimeout(resolve, 100))
  assert.equal(pushes.length, 0, 'nothing pushed while the commit is in flight')
  storage.held = null
  release()
  await enqueued
  await syncing
  await client.flush()
  assert.ok(pushes.length > 0 && pushes.every((p) => p.saved), 'pushed only once saved')
  assert.ok(pushes.every((p) => p.body.mutations.map((m) => m.row.id).join() === 'held'))
  assert.equal((await serverRows(client, 'tasks')).map((row) => row.id).join(), 'held')
  client.close()
})
