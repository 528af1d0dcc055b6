// SIGKILL during enqueue and during drain (AsyncStorage adapter on files): nothing that
// was committed is lost, nothing is applied twice, the outbox ends empty.
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { fileURLToPath } from 'node:url'
import { FerryClient } from '../dist/index.js'
import { fileStorage, serverRows, url } from './support.mjs'

const child = fileURLToPath(new URL('./kill-child.mjs', import.meta.url))

/** Runs the child until `kill(lines)` says so (then SIGKILL) or it exits; returns its lines. */
function run(args, kill) {
  return new Promise((resolve, reject) => {
    const process_ = spawn(process.execPath, [child, ...args], { env: process.env, stdio: ['ignore', 'pipe', 'inherit'] })
    const lines = []
    let buffer = ''
    let killed = false
    const timer = setTimeout(() => process_.kill('SIGKILL'), 120000)
    process_.stdout.on('data', (chunk) => {
      buffer += chunk
      let newline
      while ((newline = buffer.indexOf('\n')) >= 0) {
        lines.push(buffer.slice(0, newline))
        buffer = buffer.slice(newline + 1)
      }
      if (!killed && kill(lines)) {
        killed = true
        // A random moment after the trigger: between any two awaits.
        setTimeout(() => process_.kill('SIGKILL'), Math.floor(Math.random() * 15))
      }
    })
    process_.on('error', reject)
    process_.on('exit', (code, signal) => {
      clearTimeout(timer)
      resolve({ lines, code, signal })
    })
  })
}

test('a process killed during enqueue and during drain loses nothing and applies nothing twice', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'ferry-js-kill-'))
  try {
    const committed = new Set()
    let next = 0
    let user = null
    for (let round = 0; round < 2; round++) {
      const target = 5 + Math.floor(Math.random() * 10)
      const enqueue = await run([dir, 'enqueue', String(next)], (lines) => lines.filter((l) => l.startsWith('committed')).length >= target)
      assert.equal(enqueue.signal, 'SIGKILL', JSON.stringify(enqueue))
      const ready = enqueue.lines.find((l) => l.startsWith('ready'))
      if (user) assert.equal(ready, `ready ${user}`, 'the session survived the kill')
      user = ready.slice(6)
      for (const line of enqueue.lines) if (line.startsWith('committed ')) committed.add(Number(line.slice(10)))
      next = Math.max(...committed) + 2 // the one in flight may or may not have committed
      const pushes = 1 + Math.floor(Math.random() * 3)
      await run([dir, 'drain'], (lines) => lines.filter((l) => l === 'pushed').length >= pushes)
    }
    const final = await run([dir, 'drain'], () => false)
    assert.equal(final.code, 0, JSON.stringify(final.lines.slice(-5)))
    const client = await FerryClient.open({ url, storage: fileStorage(dir), stream: 'none', autoStart: false })
    assert.equal(client.user.id, user)
    assert.equal(client.status.pending, 0)
    const rejected = []
    client.onEvent((e) => e.type === 'rejected' && rejected.push(e))
    await client.sync()
    assert.equal(rejected.length, 0)
    const server = await serverRows(client, 'tasks')
    const ids = server.map((row) => Number(row.id.slice(1)))
    assert.equal(new Set(ids).size, ids.length)
    for (const id of committed) assert.ok(ids.includes(id), `committed task ${id} is on the server`)
    for (const row of server) assert.equal(row.title, `task ${row.id.slice(1)}`)
    // Every row the server has is one this device committed (at most the in-flight one per kill besides).
    assert.ok(ids.length - committed.size <= 3, `${ids.length} rows for ${committed.size} committed`)
    assert.deepEqual(client.rows('tasks').map((r) => r.id).sort(), server.map((r) => r.id).sort())
    client.close()
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
})
