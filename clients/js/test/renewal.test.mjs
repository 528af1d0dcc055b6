// Run against a gateway with short tokens (FERRY_ACCESS_TOKEN_TTL=60) that warns at once
// (FERRY_STREAM_TOKEN_WARNING=3600): the stream is renewed mid-way, WebSocket in band
// (the same socket), SSE by reopening, and no change made around the renewal is missed.
import assert from 'node:assert/strict'
import { after, test } from 'node:test'
import { closeAll, device, email, until } from './support.mjs'

after(closeAll)

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

for (const stream of ['websocket', 'sse']) {
  test(`a ${stream} stream renewed mid-way misses no change`, async () => {
    const address = email()
    const a = await device({ stream })
    const b = await device({ autoStart: false })
    // Closed whatever happens: a failed assertion must fail the test, not leave a stream
    // reconnecting that keeps this process (and `node --test`) alive.
    try {
      await a.link(address, 'renewal password')
      await b.signIn(address, 'renewal password')
      await until(() => a.status.connected, 10000, 'the stream open')
      const opened = a.streamsOpened
      await b.enqueue('tasks', 'upsert', { id: 'before', title: 'before' })
      await b.sync()
      await until(() => a.row('tasks', { id: 'before' }), 10000, 'the change before the renewal')
      // An access token's claims are its session, device and times in whole seconds, so a
      // refresh within the second of the stream's token returns that very token, and there
      // is nothing to renew. Past that second, the refresh brings a new one.
      await sleep(1100)
      const token = a.session.access_token
      // A refresh renews the warned stream; a change is made while it happens.
      const renewal = a.refresh(true)
      await b.enqueue('tasks', 'upsert', { id: 'during', title: 'during' })
      await Promise.all([renewal, b.sync()])
      assert.notEqual(a.session.access_token, token, 'the refresh brought a new access token')
      await until(() => a.row('tasks', { id: 'during' }), 10000, 'the change during the renewal')
      await until(() => a.status.connected, 10000, 'the stream open again')
      if (stream === 'websocket') assert.equal(a.streamsOpened, opened, 'renewed in band, on the same socket')
      else assert.equal(a.streamsOpened, opened + 1, 'SSE reopened with the fresh token')
      await b.enqueue('tasks', 'upsert', { id: 'after', title: 'after' })
      await b.sync()
      await until(() => a.row('tasks', { id: 'after' }), 10000, 'the change after the renewal')
    } finally {
      a.close()
      b.close()
    }
  })
}
