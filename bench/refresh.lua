-- wrk script of bench/refresh-flood.sh: POST /v1/auth/refresh as fast as answers come,
-- each with the refresh token the last 200 carried (the rotation a client follows), the
-- same one again after a 429. Arguments: the session's first refresh token.
local token

function init(args)
    token = args[1]
end

request = function()
    return wrk.format("POST", "/v1/auth/refresh", { ["Content-Type"] = "application/json" },
        '{"refresh_token":"' .. token .. '"}')
end

response = function(status, headers, body)
    if status == 200 then
        token = body:match('"refresh_token":"([^"]+)"') or token
    end
end
