// Two devices of one user making random concurrent edits of every strategy, offline and
// online, converge on the server's rows.
import assert from 'node:assert/strict'
import { after, test } from 'node:test'
import { closeAll, device, email } from './support.mjs'

after(closeAll)

function random(seed) {
  let state = seed >>> 0
  return () => ((state = (state * 1664525 + 1013904223) >>> 0) / 2 ** 32)
}

const strip = (rows) =>
  rows.map((row) => JSON.stringify(Object.keys(row).sort().map((k) => [k, row[k]]))).sort()

test('two clients of one user converge after random concurrent edits of every strategy', async () => {
  const seed = Number(process.env.FERRY_SEED ?? Date.now() % 100000)
  console.log(`seed ${seed}`)
  const next = random(seed)
  const pick = (list) => list[Math.floor(next() * list.length)]
  const address = email()
  const a = await device({ autoStart: false })
  await a.link(address, 'converge password')
  const b = await device({ autoStart: false })
  await b.signIn(address, 'converge password')
  await a.claimLock('active_game', 'current')
  const clients = [a, b]
  for (let round = 0; round < 4; round++) {
    const edits = []
    for (const client of clients) {
      for (let i = 0; i < 12; i++) {
        const id = `t${Math.floor(next() * 6)}`
        const choice = Math.floor(next() * 7)
        if (choice === 0) edits.push(client.enqueue('tasks', 'delete', { id }))
        else if (choice <= 2) edits.push(client.enqueue('tasks', 'upsert', { id, title: `r${round}-${i}`, position: next() }))
        else if (choice === 3) edits.push(client.enqueue('profiles', 'upsert', { username: pick(['ana', 'bo', 'cy']) }))
        else if (choice === 4) {
          const achievement = pick(['first', 'fast', 'streak'])
          edits.push(client.enqueue('achievements', next() < 0.5 ? 'insert' : 'delete', { achievement_id: achievement }))
        } else if (choice === 5) {
          edits.push(
            client.enqueue('game_records', 'insert', {
              id: `g-${round}-${Math.floor(next() * 3)}`,
              puzzle_id: 'p1',
              seconds: Math.floor(next() * 600),
              finished_at: new Date().toISOString(),
            }),
          )
        } else edits.push(client.enqueue('active_game', 'upsert', { slot: 'current', hints: Math.floor(next() * 9) }))
      }
    }
    await Promise.all(edits)
    // Both drain at once (concurrently), then each pulls what the other did. flush retries
    // what the server answers as retryable, as an app's scheduler does: two pushes writing
    // the same rows in opposite orders can deadlock, and PostgreSQL aborts one (503).
    await Promise.all(clients.map((client) => client.flush()))
    await Promise.all(clients.map((client) => client.flush()))
  }
  for (const client of clients) assert.equal(client.status.pending, 0)
  for (const table of ['tasks', 'profiles', 'achievements', 'game_records', 'active_game']) {
    assert.deepEqual(strip(a.rows(table)), strip(b.rows(table)), `${table} (seed ${seed})`)
  }
  // And both equal a fresh device's first load.
  const c = await device({ autoStart: false })
  await c.signIn(address, 'converge password')
  for (const table of ['tasks', 'profiles', 'achievements', 'game_records', 'active_game']) {
    assert.deepEqual(strip(c.rows(table)), strip(a.rows(table)), `${table} vs a first load (seed ${seed})`)
  }
  for (const client of [a, b, c]) client.close()
})
