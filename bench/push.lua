-- wrk script for POST /v1/push, shared by bench/sync.sh and bench/cue-cost.sh.
-- Arguments: TOKENS_FILE THREADS TEMPLATE_FILE BASE. TEMPLATE_FILE's first line is the
-- JSON body with "@" where the mutation id goes.
-- Each thread owns the devices (tokens) of push.tsv whose index is its own modulo the
-- thread count and rotates over them; a request's number is base + the thread's
-- request counter, so ids increase per device. With many devices per connection a
-- device's previous batch has long been answered when its turn comes again.
local counter = 0
local threads = {}
function setup(thread)
    counter = counter + 1
    thread:set("id", counter)
    threads[#threads + 1] = thread
end
-- Batches answered with a duplicate (ids out of order on a device): the run is void.
duplicates = 0
function response(status, headers, body)
    if body:find('"duplicate"', 1, true) then duplicates = duplicates + 1 end
end
function done(summary, latency, requests)
    local total = 0
    for _, thread in ipairs(threads) do total = total + thread:get("duplicates") end
    io.write("duplicate batches: " .. total .. "\n")
end
-- The template is split at its "@"s once, and each body joined with the request's
-- number between the parts: a pattern substitution over the body per request cost wrk
-- about 50 µs of CPU, on the cores the gateway and PostgreSQL share.
local tokens, parts, base, n = {}, {}, 0, 0
function init(args)
    local threads, index = tonumber(args[2]), 0
    for line in io.lines(args[1]) do
        if index % threads == id - 1 then tokens[#tokens + 1] = "Bearer " .. line end
        index = index + 1
    end
    local f = io.open(args[3]); local template = f:read("*l"); f:close()
    for part in (template .. "@"):gmatch("([^@]*)@") do parts[#parts + 1] = part end
    base = tonumber(args[4])
end
request = function()
    n = n + 1
    return wrk.format("POST", "/v1/push",
        { ["Authorization"] = tokens[n % #tokens + 1], ["Content-Type"] = "application/json" },
        table.concat(parts, tostring(base + n)))
end
