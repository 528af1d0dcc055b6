// The service worker: keeps the page and the client's modules in a cache so that the
// page opens with the gateway (and this web server) stopped. Network first, so a new
// version is picked up whenever the server answers; the cache when it does not. Only
// this origin's GETs: the gateway's API calls are never cached (the client's outbox and
// IndexedDB store are what make the data work offline).
const CACHE = 'tasks-web-v1'
const FILES = [
  './',
  './index.html',
  './app.js',
  './style.css',
  './ferry/index.js',
  './ferry/client.js',
  './ferry/errors.js',
  './ferry/storage.js',
]

self.addEventListener('install', (event) => {
  event.waitUntil(
    caches
      .open(CACHE)
      .then((cache) => cache.addAll(FILES))
      .then(() => self.skipWaiting()),
  )
})

self.addEventListener('activate', (event) => {
  event.waitUntil(
    caches
      .keys()
      .then((names) => Promise.all(names.filter((name) => name !== CACHE).map((name) => caches.delete(name))))
      .then(() => self.clients.claim()),
  )
})

self.addEventListener('fetch', (event) => {
  const request = event.request
  if (request.method !== 'GET' || new URL(request.url).origin !== self.location.origin) return
  event.respondWith(
    fetch(request)
      .then((response) => {
        if (response.ok) {
          const copy = response.clone()
          void caches.open(CACHE).then((cache) => cache.put(request, copy))
        }
        return response
      })
      .catch(() => caches.match(request, { ignoreSearch: true }).then((cached) => cached ?? Response.error())),
  )
})
