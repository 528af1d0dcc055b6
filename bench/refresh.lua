-- wrk script of bench/refresh-flood.sh: POST /v1/auth/refresh as fast as answers come,
-- each with the refresh token the last 200 carried (the rotation a client follows), the
-- same one again after a 429. Arguments: a file holding the session's refresh token,
-- rewritten with each new one (so the next run of the flood goes on from it).
local token, path

function init(args)
    path = args[1]
    local file = io.open(path)
    token = file:read("*l")
    file:close()
end

request = function()
    return wrk.format("POST", "/v1/auth/refresh", { ["Content-Type"] = "application/json" },
        '{"refresh_token":"' .. token .. '"}')
end

response = function(status, headers, body)
    if status == 200 then
        local rotated = body:match('"refresh_token":"([^"]+)"')
        if rotated and rotated ~= token then
            token = rotated
            local file = io.open(path, "w")
            file:write(token, "\n")
            file:close()
        end
    end
end
