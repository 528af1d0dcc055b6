// A device in its own process, on a file-backed AsyncStorage, for kill.test.mjs:
//   node kill-child.mjs DIR enqueue START   enqueue tasks START, START+1, … printing each once committed
//   node kill-child.mjs DIR drain           drain the outbox in batches of 3, printing each push
import { FerryClient } from '../dist/index.js'
import { fileStorage, url } from './support.mjs'

const [dir, mode, start] = process.argv.slice(2)
const fetcher = async (input, init) => {
  const response = await fetch(input, init)
  if (String(input).endsWith('/v1/push')) console.log('pushed')
  return response
}
const client = await FerryClient.open({ url, storage: fileStorage(dir), stream: 'none', autoStart: false, batchSize: 3, fetch: fetcher })
console.log(`ready ${client.user.id}`)
if (mode === 'enqueue') {
  for (let i = Number(start); i < Number(start) + 100000; i++) {
    await client.enqueue('tasks', 'upsert', { id: `k${i}`, title: `task ${i}`, position: i })
    console.log(`committed ${i}`)
  }
} else {
  await client.flush(120000)
  console.log('drained')
  process.exit(0)
}
