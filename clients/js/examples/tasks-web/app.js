// The tasks web example: a to-do list on the `tasks` example table (sql/examples/tasks),
// plain DOM and FerryJS, no framework. The gateway's URL is `?gateway=` (kept in
// localStorage for the next visit), else http://127.0.0.1:8080 (`ferry dev`'s).
import { FerryClient, FerryError, IndexedDBStorage } from './ferry/index.js'

const $ = (id) => document.getElementById(id)
const params = new URLSearchParams(location.search)
const gateway = params.get('gateway') ?? localStorage.getItem('ferry-gateway') ?? 'http://127.0.0.1:8080'
localStorage.setItem('ferry-gateway', gateway)

// The page and the client's modules, cached for offline starts.
if ('serviceWorker' in navigator) {
  navigator.serviceWorker.register('./sw.js').catch((error) => say(`service worker: ${error}`))
}

let ferry = null

function say(text) {
  $('message').textContent = text
}

function time(ms) {
  return new Date(ms).toLocaleTimeString()
}

// MARK: - Status and account

function showStatus(status) {
  const connection = $('status-connection')
  connection.textContent = status.connected ? 'Connected' : 'Offline'
  connection.className = status.connected ? 'online' : 'offline'
  const pending = $('status-pending')
  pending.dataset.count = String(status.pending)
  pending.textContent = `${status.pending} pending`
  // The client knows when this visit last synced; the page keeps it for the next (offline) one.
  if (status.lastSyncedAt) localStorage.setItem('ferry-last-synced', String(status.lastSyncedAt))
  const synced = status.lastSyncedAt ?? (Number(localStorage.getItem('ferry-last-synced')) || null)
  $('status-synced').textContent = synced ? `last synced ${time(synced)}` : 'never synced'
  $('status-synced').dataset.at = String(synced ?? '')
  const user = status.user
  document.body.dataset.user = user?.id ?? ''
  document.body.dataset.anonymous = String(user?.is_anonymous ?? true)
  $('account-user').textContent = !user
    ? 'Not signed in'
    : user.is_anonymous
      ? 'On this device only (anonymous). Create an account to sync your devices, or sign in.'
      : `Signed in as ${user.email}`
  $('account-form').hidden = !user || !user.is_anonymous
  $('sign-out').hidden = !user || user.is_anonymous
}

/** Asks which tasks to keep (the 409 resolution_required choice): 'keep_device', 'keep_cloud' or 'cancel'. */
function askWhichToKeep(details) {
  const dialog = $('choice')
  const tasks = (n) => `${n} task${n === 1 ? '' : 's'}`
  $('choice-text').textContent =
    `This device holds ${tasks(details.device_rows)} made before signing in; the account holds ` +
    `${tasks(details.cloud_rows)}. Which do you keep? The other is deleted.`
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue || 'cancel'), { once: true })
    dialog.showModal()
  })
}

async function account(action) {
  const email = $('email').value.trim()
  const password = $('password').value
  say('')
  try {
    if (action === 'link') {
      await ferry.link(email, password)
      say(`Account created: ${email}. Sign in with it on your other devices.`)
      return
    }
    try {
      await ferry.signIn(email, password)
    } catch (error) {
      if (!(error instanceof FerryError) || error.code !== 'resolution_required') throw error
      const choice = await askWhichToKeep(error.details)
      if (choice === 'cancel') return say('Sign-in cancelled: nothing changed.')
      await ferry.signIn(email, password, { resolve: choice })
    }
    $('password').value = ''
    say(`Signed in as ${email}.`)
  } catch (error) {
    say(error instanceof FerryError ? `${error.message} (${error.code})` : String(error))
  }
}

// MARK: - The list

function sorted(rows) {
  return rows.sort((a, b) => (a.position ?? 0) - (b.position ?? 0) || String(a.id).localeCompare(String(b.id)))
}

// The task being edited: its row stays as it is (form, typed text, focus) when the list
// is drawn again for a sync that happens meanwhile.
let editing = null

function render(rows) {
  const list = $('tasks')
  const kept = editing ? list.querySelector(`.task[data-id="${CSS.escape(editing)}"]`) : null
  if (!kept) editing = null
  const items = []
  for (const task of sorted(rows)) {
    if (kept && task.id === editing) {
      items.push(kept)
      continue
    }
    const done = Boolean(task.metadata?.completed_at)
    const item = document.createElement('li')
    item.className = done ? 'task done' : 'task'
    item.dataset.id = task.id
    const toggle = document.createElement('input')
    toggle.type = 'checkbox'
    toggle.className = 'toggle'
    toggle.checked = done
    toggle.title = 'Complete'
    toggle.addEventListener('change', () => complete(task.id, toggle.checked))
    const title = document.createElement('span')
    title.className = 'title'
    title.textContent = task.title
    const edit = document.createElement('button')
    edit.className = 'edit'
    edit.textContent = 'Edit'
    edit.addEventListener('click', () => startEditing(item, task))
    const remove = document.createElement('button')
    remove.className = 'delete'
    remove.textContent = 'Delete'
    remove.addEventListener('click', () => write('delete', { id: task.id }))
    item.append(toggle, title, edit, remove)
    items.push(item)
  }
  if (editing && !rows.some((task) => task.id === editing)) editing = null // deleted elsewhere
  list.replaceChildren(...items)
  if (kept) kept.querySelector('.edit-title')?.focus()
  $('empty').hidden = rows.length > 0
}

function startEditing(item, task) {
  editing = task.id
  const input = document.createElement('input')
  input.className = 'edit-title'
  input.value = task.title
  const save = document.createElement('button')
  save.className = 'save'
  save.textContent = 'Save'
  const form = document.createElement('form')
  form.className = 'edit-form'
  form.style.display = 'contents'
  form.append(input, save)
  form.addEventListener('submit', (event) => {
    event.preventDefault()
    const title = input.value.trim()
    editing = null
    if (title) void write('upsert', { id: task.id, title })
    else render(ferry.rows('tasks'))
  })
  item.querySelector('.title').replaceWith(form)
  item.querySelector('.edit').remove()
  input.focus()
}

function complete(id, done) {
  // The row as it is now (a sync may have changed it since the list was drawn).
  const metadata = { ...(ferry.row('tasks', { id })?.metadata ?? {}) }
  if (done) metadata.completed_at = new Date().toISOString()
  else delete metadata.completed_at
  return write('upsert', { id, metadata })
}

async function write(op, row) {
  try {
    await ferry.enqueue('tasks', op, row)
  } catch (error) {
    say(String(error))
  }
}

// MARK: - Start

async function open() {
  // Offline on a first visit there is no account yet: try again until the gateway answers.
  for (;;) {
    try {
      return await FerryClient.open({ url: gateway, storage: new IndexedDBStorage('ferry-tasks-web'), maxBackoff: 5_000 })
    } catch (error) {
      say(`Cannot reach ${gateway} to make an account (${error.message}); trying again…`)
      await new Promise((resolve) => setTimeout(resolve, 3_000))
    }
  }
}

ferry = await open()
ferry.observe('tasks', render)
ferry.onStatus(showStatus)
ferry.onEvent((event) => {
  if (event.type === 'rejected') say(`The server refused a change (${event.code}): ${event.message}`)
  else if (event.type === 'session_lost') say(`Signed out by the server (${event.code}).`)
})
// The browser knows when the network comes back before the backoff does.
window.addEventListener('online', () => ferry.kick())
setInterval(() => showStatus(ferry.status), 1_000)

$('new-task').addEventListener('submit', (event) => {
  event.preventDefault()
  const title = $('new-title').value.trim()
  if (!title) return
  $('new-title').value = ''
  void write('upsert', { id: crypto.randomUUID(), title, parent_id: 'root', position: Date.now(), metadata: {} })
})
$('account-form').addEventListener('submit', (event) => {
  event.preventDefault()
  void account(event.submitter?.value === 'link' ? 'link' : 'sign-in')
})
$('sign-out').addEventListener('click', async () => {
  try {
    await ferry.signOut()
    say('Signed out: this device starts afresh.')
  } catch (error) {
    say(String(error))
  }
})
document.body.dataset.ready = 'yes'
