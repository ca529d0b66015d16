-- wrk script for bench/worker_poll.py: each connection is one simulated worker daemon that polls
-- the control plane every KLIQUE_POLL_MS (0: as fast as it can), with the worker token of line
-- (connection number) of KLIQUE_TOKENS, sending KLIQUE_ENDPOINT: "heartbeat", "claim", "sync" (a
-- heartbeat and a claim in one call, bench/worker_sync.py) or "pair" (a heartbeat and a claim as two
-- calls, one after the other: what a daemon sent before sync).
local tokens, counter = {}, 0
local endpoint = os.getenv("KLIQUE_ENDPOINT") or "heartbeat"
local poll_ms = tonumber(os.getenv("KLIQUE_POLL_MS") or "0")
local bodies = {
  heartbeat = '{"tasks": [], "gpus": "8", "free_gpus": "8"}',
  claim = '{"slots": ["1", "1", "1", "1", "1", "1", "1", "1"], "max_tasks": 1}',
}
bodies.sync = '{"reports": [], "heartbeat": ' .. bodies.heartbeat .. ', "claim": ' .. bodies.claim .. '}'
local sent = 0
-- KLIQUE_SPREAD_FIRST: how many connections this thread holds, when each one's first poll is to
-- come at a uniformly random point of one interval (a running estate, whose daemons started at
-- different times) rather than after one jittered interval (all of them at once: a restart storm).
local spread_first = tonumber(os.getenv("KLIQUE_SPREAD_FIRST") or "0")
local delays = 0

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
  local path = endpoint
  sent = sent + 1
  if endpoint == "pair" then
    path = (sent % 2 == 1) and "heartbeat" or "claim"
  end
  if endpoint ~= "pair" or sent % 2 == 0 then
    next_token = next_token % #tokens + 1
  end
  return wrk.format("POST", "/api/v1/workers/" .. path, {
    ["Authorization"] = "Bearer " .. token,
    ["Content-Type"] = "application/json",
  }, bodies[path])
end

function delay()
  if poll_ms == 0 then return 0 end
  delays = delays + 1
  if delays <= spread_first then return math.random(0, poll_ms) end
  -- "pair": the claim follows its heartbeat at once; the next pair after the interval.
  if endpoint == "pair" and sent % 2 == 1 then return 0 end
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
