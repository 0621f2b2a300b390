-- post.lua - wrk script used by bench/load.sh: POST one fixed body.
--
-- Environment (read once per wrk thread):
--   BODY_FILE      file whose bytes are the request body (required)
--   CONTENT_TYPE   Content-Type header (default application/json)
--   HEADER_LEN     if set, sent as Inference-Header-Content-Length
--   API_KEY        if set, sent as Authorization: Bearer API_KEY
-- done() prints one machine-readable line, parsed by load.sh:
--   RESULT requests=N duration_s=S rps=R p50_ms=A p90_ms=B p99_ms=C
--          min_ms=M max_ms=D non2xx=E socket_errors=F
-- Nothing is asserted: wrk reports, load.sh tabulates.

local path = os.getenv("BODY_FILE")
local f = assert(io.open(path or "", "rb"), "BODY_FILE not readable: " .. tostring(path))
local body = f:read("*a")
f:close()

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = os.getenv("CONTENT_TYPE") or "application/json"
local hl = os.getenv("HEADER_LEN")
if hl and hl ~= "" then
  wrk.headers["Inference-Header-Content-Length"] = hl
end
local key = os.getenv("API_KEY")
if key and key ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. key
end

function done(summary, latency, requests)
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    "RESULT requests=%d duration_s=%.3f rps=%.1f p50_ms=%.3f p90_ms=%.3f " ..
    "p99_ms=%.3f min_ms=%.3f max_ms=%.3f non2xx=%d socket_errors=%d\n",
    summary.requests, secs, summary.requests / secs,
    latency:percentile(50) / 1e3, latency:percentile(90) / 1e3,
    latency:percentile(99) / 1e3, latency.min / 1e3, latency.max / 1e3, e.status,
    e.connect + e.read + e.write + e.timeout))
end
