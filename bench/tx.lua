-- wrk script for bench/throughput.py: one transaction = a create request, then its end request.
-- Run with one connection per thread (-t N -c N) so each connection's requests are sequential.
--   wrk ... -s tx.lua URL -- MODE PREFIX [TOKEN]
-- MODE "halfmoon": POST /api/v1/transactions (201), then POST /api/v1/transactions/<id>/end
--                  {"producer_group":"BenchGroup","action":"commit"} (200).
-- MODE "bare":     POST /bare/insert (201), then POST /bare/<id>/commit (200).
-- msg_ids are chosen by the client: PREFIX .. thread id .. "-" .. counter (e.g. b7-123).
-- done() prints "BENCH key=value ..." and "BENCH_STATUS phase:status=count" lines.

local threads = {}
local next_tid = 1

function setup(thread)
   thread:set("tid", next_tid)
   next_tid = next_tid + 1
   table.insert(threads, thread)
end

function init(args)
   mode = args[1] or "halfmoon"
   prefix = args[2] or "b"
   local token = args[3]
   req_headers = { ["Content-Type"] = "application/json" }
   if token and token ~= "" then
      req_headers["Authorization"] = "Bearer " .. token
   end
   if mode == "bare" then
      create_path = "/bare/insert"
      end_format = "/bare/%s/commit"
   else
      create_path = "/api/v1/transactions"
      end_format = "/api/v1/transactions/%s/end"
   end
   payload = string.rep("x", 1024)
   end_body = '{"producer_group":"BenchGroup","action":"commit"}'
   n = 0
   phase = "create"
   current = ""
   created = 0
   committed = 0
   create_failed = 0
   end_failed = 0
   status_counts = {}
end

function request()
   if phase == "create" then
      n = n + 1
      current = prefix .. tid .. "-" .. n
      local body = '{"producer_group":"BenchGroup","topic":"BenchTopic","tags":"bench","keys":"'
         .. current .. '","msg_id":"' .. current .. '","body":"' .. payload .. '"}'
      return wrk.format("POST", create_path, req_headers, body)
   end
   return wrk.format("POST", string.format(end_format, current), req_headers, end_body)
end

function response(status, headers, body)
   local key = phase .. ":" .. status
   status_counts[key] = (status_counts[key] or 0) + 1
   if phase == "create" then
      if status == 201 then
         created = created + 1
         phase = "end"
      else
         create_failed = create_failed + 1
      end
   else
      if status == 200 then
         committed = committed + 1
      else
         end_failed = end_failed + 1
      end
      phase = "create"
   end
end

function done(summary, latency, requests)
   local totals = { created = 0, committed = 0, create_failed = 0, end_failed = 0 }
   local statuses = {}
   for _, thread in ipairs(threads) do
      for name, _ in pairs(totals) do
         totals[name] = totals[name] + (thread:get(name) or 0)
      end
      local counts = thread:get("status_counts") or {}
      for key, count in pairs(counts) do
         statuses[key] = (statuses[key] or 0) + count
      end
   end
   local e = summary.errors
   io.write(string.format(
      "BENCH committed=%d created=%d create_failed=%d end_failed=%d requests=%d duration_us=%d "
         .. "p50_us=%d p90_us=%d p99_us=%d max_us=%d "
         .. "err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d\n",
      totals.committed, totals.created, totals.create_failed, totals.end_failed,
      summary.requests, summary.duration,
      math.floor(latency:percentile(50)), math.floor(latency:percentile(90)),
      math.floor(latency:percentile(99)), math.floor(latency.max),
      e.connect, e.read, e.write, e.status, e.timeout))
   for key, count in pairs(statuses) do
      io.write(string.format("BENCH_STATUS %s=%d\n", key, count))
   end
end
