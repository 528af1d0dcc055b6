-- wrk script for GET /v1/pull, shared by bench/sync.sh and bench/pgbouncer.sh.
-- Arguments: PULL_TSV LIMIT, PULL_TSV's lines "token<TAB>sealed cursor".
-- Rotates over the (token, sealed cursor) pairs of pull.tsv; threads start apart.
local counter = 0
function setup(thread)
    counter = counter + 1
    thread:set("id", counter)
end
local requests = {}
local i = 0
function init(args)
    for line in io.lines(args[1]) do
        local token, cursor = line:match("^(%S+)\t(%S+)$")
        requests[#requests + 1] = wrk.format("GET", "/v1/pull?limit=" .. args[2] .. "&cursor=" .. cursor,
            { ["Authorization"] = "Bearer " .. token })
    end
    i = (id * 37) % #requests
end
request = function()
    i = i % #requests + 1
    return requests[i]
end
