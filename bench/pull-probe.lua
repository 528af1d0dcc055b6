-- wrk script of bench/fairness.sh and bench/refresh-flood.sh: another user's GET /v1/pull,
-- as the users whose access tokens are the lines of args[1] in turn, args[2] ms apart per
-- connection; prints "probe p50_us p99_us requests failed" (wrk's own are rounded).
local requests, i, pause = {}, 0, 0
function init(args)
    for line in io.lines(args[1]) do
        requests[#requests + 1] = wrk.format("GET", "/v1/pull", { ["Authorization"] = "Bearer " .. line })
    end
    pause = tonumber(args[2])
end
request = function()
    i = i % #requests + 1
    return requests[i]
end
delay = function() return pause end
function done(summary, latency, requests)
    local failed = summary.errors.status + summary.errors.connect + summary.errors.read
        + summary.errors.write + summary.errors.timeout
    io.write(string.format("probe %d %d %d %d\n", latency:percentile(50), latency:percentile(99),
        summary.requests, failed))
end
