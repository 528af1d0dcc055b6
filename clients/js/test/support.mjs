// Shared by the tests: the gateway's URL (FERRY_URL, set by the Swift test that starts
// `ferry serve` on a fresh database), a file-backed AsyncStorage for Node, Debian's ws.
import { mkdir, readFile, readdir, rename, rm, stat, writeFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { FerryClient, KeyValueStorage, MemoryStorage } from '../dist/index.js'

export const url = process.env.FERRY_URL
if (!url) throw new Error('FERRY_URL is not set: the Swift test FerryJSClientTests runs these')

const require = createRequire(import.meta.url)
/** Debian's node-ws (/usr/share/nodejs/ws), injected as the WebSocket constructor. */
export const WebSocket = require('/usr/share/nodejs/ws')

/**
 * AsyncStorage's API over a folder, one file per key, each `setItem` atomic (a write to a
 * temporary file, then rename), as React Native's store is per key; `multiSet` is a loop,
 * so a kill can cut it between two keys: the client must not rely on it.
 */
export class FileAsyncStorage {
  constructor(dir) {
    this.dir = dir
  }
  file(key) {
    return join(this.dir, encodeURIComponent(key))
  }
  async getItem(key) {
    try {
      return await readFile(this.file(key), 'utf8')
    } catch (error) {
      if (error.code === 'ENOENT') return null
      throw error
    }
  }
  async setItem(key, value) {
    await mkdir(this.dir, { recursive: true })
    const temporary = this.file(key) + '.tmp' + process.pid
    await writeFile(temporary, value)
    await rename(temporary, this.file(key))
  }
  async removeItem(key) {
    await rm(this.file(key), { force: true })
  }
  async getAllKeys() {
    await mkdir(this.dir, { recursive: true })
    return (await readdir(this.dir)).filter((name) => !name.includes('.tmp')).map(decodeURIComponent)
  }
  async multiGet(keys) {
    return Promise.all(keys.map(async (key) => [key, await this.getItem(key)]))
  }
  async multiSet(pairs) {
    for (const [key, value] of pairs) await this.setItem(key, value)
  }
  async multiRemove(keys) {
    for (const key of keys) await this.removeItem(key)
  }
}

export function fileStorage(dir) {
  return new KeyValueStorage(new FileAsyncStorage(dir))
}

const opened = new Set()

/** A client on a fresh in-memory store (a new device); `closeAll` closes it if the test did not. */
export async function device(options = {}) {
  const client = await FerryClient.open({ url, storage: options.storage ?? new MemoryStorage(), stream: 'none', WebSocket, ...options })
  opened.add(client)
  return client
}

/**
 * Closes every client `device` opened: each test file's `after` hook, so a test that
 * fails before its own `close()` calls leaves no stream reconnecting or timer pending,
 * which would keep the file's process, and `node --test`, from ever exiting.
 */
export function closeAll() {
  for (const client of opened) client.close()
  opened.clear()
}

/** Waits until `predicate()` holds, polling; fails after `ms`. */
export async function until(predicate, ms = 15000, what = 'condition') {
  const end = Date.now() + ms
  while (Date.now() < end) {
    if (await predicate()) return
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  throw new Error(`timed out waiting for ${what}`)
}

export function email() {
  return `js-${Math.random().toString(36).slice(2)}@example.org`
}

/** Raw API call (for checking what the server holds). */
export async function api(method, path, token, body) {
  const response = await fetch(url + path, {
    method,
    headers: { ...(token ? { Authorization: `Bearer ${token}` } : {}), 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await response.text()
  return { status: response.status, json: text ? JSON.parse(text) : null }
}

/** Everything the server holds for `client`'s user in `table` (a full pull). */
export async function serverRows(client, table) {
  const rows = []
  let cursor = null
  for (let i = 0; i < 100; i++) {
    const answer = await client.request('GET', '/v1/pull' + (cursor ? `?cursor=${encodeURIComponent(cursor)}` : ''))
    rows.push(...(answer.changes[table]?.upserts ?? []))
    cursor = answer.cursor
    if (!answer.has_more) break
  }
  return rows
}

/**
 * The mails to `recipient` the gateway's SMTP relay received, oldest first: the Maildir
 * JSClientTests' aiosmtpd writes (FERRY_JS_MAILDIR), one file per mail under `new/`.
 */
export async function mailsTo(recipient) {
  const maildir = process.env.FERRY_JS_MAILDIR
  if (!maildir) throw new Error('FERRY_JS_MAILDIR is not set: JSClientTests starts the gateway with an SMTP relay')
  let names = []
  try {
    names = await readdir(join(maildir, 'new'))
  } catch (error) {
    if (error.code !== 'ENOENT') throw error
  }
  const mails = []
  for (const name of names) {
    const file = join(maildir, 'new', name)
    const text = (await readFile(file, 'utf8')).replace(/\r\n/g, '\n')
    const split = text.indexOf('\n\n')
    const head = split < 0 ? text : text.slice(0, split)
    const to = head.split('\n').find((line) => /^to:/i.test(line)) ?? ''
    if (to.toLowerCase().includes(recipient.toLowerCase())) {
      mails.push({ time: (await stat(file)).mtimeMs, name, body: split < 0 ? '' : text.slice(split + 2) })
    }
  }
  return mails.sort((a, b) => a.time - b.time || a.name.localeCompare(b.name))
}

/**
 * Waits (at most `ms`) for the `count`th mail to `recipient` and returns its one-time
 * code: as the Swift tests read it, the last word of 6 to 8 capitals and digits on a line.
 */
export async function mailedCode(recipient, count, ms = 30000) {
  let mails = []
  await until(async () => (mails = await mailsTo(recipient)).length >= count, ms, `mail ${count} to ${recipient}`)
  for (const line of mails[count - 1].body.split('\n')) {
    const words = line.split(/[ :]/).filter((word) => /^[A-Z0-9]{6,8}$/.test(word))
    if (words.length > 0) return words[words.length - 1]
  }
  throw new Error(`no code in the mail to ${recipient}: ${mails[count - 1].body}`)
}
