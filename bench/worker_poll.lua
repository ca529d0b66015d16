-- wrk script for bench/worker_poll.py: each connection is one simulated worker daemon that polls
-- the control plane every KLIQUE_POLL_MS (0: as fast as it can), with the worker token of line
-- (connection number) of KLIQUE_TOKENS, sending KLIQUE_ENDPOINT ("heartbeat" or "claim").
local tokens, counter = {}, 0
local endpoint = os.getenv("KLIQUE_ENDPOINT") or "heartbeat"
local poll_ms = tonumber(os.getenv("KLIQUE_POLL_MS") or "0")
local bodies = {
  heartbeat = '{"tasks": [], "gpus": "8", "free_gpus": "8"}',
  claim = '{"slots": ["1", "1", "1", "1", "1", "1", "1", "1"], "max_tasks": 1}',
}

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end

function init(args)
  for line in io.lines(os.getenv("KLIQUE_TOKENS")) do
    tokens[#tokens + 1] = line
  end
  next_token = id % #tokens + 1
end

function request()
  local token = tokens[next_token]
  next_token = next_token % #tokens + 1
  return wrk.format("POST", "/api/v1/workers/" .. endpoint, {
    ["Authorization"] = "Bearer " .. token,
    ["Content-Type"] = "application/json",
  }, bodies[endpoint])
end

function delay()
  if poll_ms == 0 then return 0 end
  return math.random(math.floor(poll_ms * 0.8), math.floor(poll_ms * 1.2))
end

function done(summary, latency, requests)
  io.write(string.format(
    'RESULT {"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, "max_us": %d, ' ..
    '"non2xx": %d, "socket_errors": %d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max,
    summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write +
    summary.errors.timeout))
end
