-- wrk script for bench/throughput.py's batch phase: one round = a batch of half messages, then
-- one end-batch committing them. Run with one connection per thread (-t N -c N).
--   wrk ... -s batch.lua URL -- PREFIX TOKEN [BATCH_SIZE]
-- 1. POST /api/v1/transactions/batch {"messages": [BATCH_SIZE half messages]} (200; each item
--    {"status":201,...} when stored).
-- 2. POST /api/v1/transactions/end-batch {"ends": [{"transaction_id","producer_group",
--    "action":"commit"}, ...]} for the same msg_ids (200; each item {"status":200,"body":{...,
--    "state":"COMMITTED",...}}).
-- A "transaction" is one half in a batch plus its end in an end-batch; it counts when its end
-- item says COMMITTED. msg_ids are PREFIX .. thread id .. "-" .. counter (e.g. bb7-123).
-- done() prints "BENCH key=value ..." and "BENCH_STATUS phase:status=count" lines, as tx.lua.

local threads = {}
local next_tid = 1

function setup(thread)
   thread:set("tid", next_tid)
   next_tid = next_tid + 1
   table.insert(threads, thread)
end

function init(args)
   prefix = args[1] or "bb"
   local token = args[2]
   batch_size = tonumber(args[3] or "32")
   req_headers = { ["Content-Type"] = "application/json" }
   if token and token ~= "" then
      req_headers["Authorization"] = "Bearer " .. token
   end
   payload = string.rep("x", 1024)
   n = 0
   phase = "create"
   ids = {}
   created = 0
   committed = 0
   create_failed = 0
   end_failed = 0
   status_counts = {}
end

local function count(text, pattern)
   local _, found = string.gsub(text, pattern, "")
   return found
end

function request()
   if phase == "create" then
      ids = {}
      local items = {}
      for i = 1, batch_size do
         n = n + 1
         local id = prefix .. tid .. "-" .. n
         ids[i] = id
         items[i] = '{"producer_group":"BenchGroup","topic":"BenchBatchTopic","tags":"bench",'
            .. '"keys":"' .. id .. '","msg_id":"' .. id .. '","body":"' .. payload .. '"}'
      end
      return wrk.format("POST", "/api/v1/transactions/batch", req_headers,
         '{"messages":[' .. table.concat(items, ",") .. ']}')
   end
   local ends = {}
   for i, id in ipairs(ids) do
      ends[i] = '{"transaction_id":"' .. id .. '","producer_group":"BenchGroup","action":"commit"}'
   end
   return wrk.format("POST", "/api/v1/transactions/end-batch", req_headers,
      '{"ends":[' .. table.concat(ends, ",") .. ']}')
end

function response(status, headers, body)
   local key = phase .. ":" .. status
   status_counts[key] = (status_counts[key] or 0) + 1
   if phase == "create" then
      local stored = 0
      if status == 200 then
         stored = count(body, '"status":%s*201')
      end
      created = created + stored
      create_failed = create_failed + (batch_size - stored)
      phase = "end"
   else
      local done_items = 0
      if status == 200 then
         done_items = count(body, '"state":%s*"COMMITTED"')
      end
      committed = committed + done_items
      end_failed = end_failed + (batch_size - done_items)
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
      for key, c in pairs(counts) do
         statuses[key] = (statuses[key] or 0) + c
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
   for key, c in pairs(statuses) do
      io.write(string.format("BENCH_STATUS %s=%d\n", key, c))
   end
end
