// A peer's worker process for the throughput benchmark (bench/throughput/run):
// Graphile Worker or pg-boss running no-op jobs through their public APIs,
// started by bench/throughput/throughput.mjs, which prepares the jobs and
// measures from the database.
//
//   node peer_worker.mjs graphile <batched|default> <concurrency>
//   node peer_worker.mjs pgboss <workers> <batchSize> <pollingIntervalSeconds>
//
// The packages are required from $AKADZED_PEERS_DIR (where the run script
// installed bench/peers/package-lock.json), the database comes from PGHOST,
// PGPORT, PGUSER and PGDATABASE. When the
// worker is ready it prints "ready". The handler records the wall-clock time
// of its first job and, for jobs whose payload has `enqueued_ms` (the
// enqueuer's wall clock, ms with a fraction), the enqueue-to-start latency.
// On SIGTERM it prints one JSON line {first_start_ms, jobs, latencies_ms}
// and exits. With $AKADZED_PEER_RECORD set (bench/endurance), it also
// appends "<start_ms> <latency_ms>" for each such job to that file, written
// every 100 ms, so that a driver can read the latencies while it runs.
import fs from "node:fs";
import { createRequire } from "node:module";
import { performance } from "node:perf_hooks";

const require = createRequire(`${process.env.AKADZED_PEERS_DIR}/package.json`);
const connection = {
  host: process.env.PGHOST,
  port: Number(process.env.PGPORT),
  user: process.env.PGUSER,
  database: process.env.PGDATABASE,
};

const wallMs = () => performance.timeOrigin + performance.now();
const stats = { first_start_ms: null, jobs: 0, latencies_ms: [] };
const recordPath = process.env.AKADZED_PEER_RECORD;
let recordLines = [];
const flushRecord = () => {
  if (recordPath && recordLines.length) {
    fs.appendFileSync(recordPath, recordLines.join(""));
    recordLines = [];
  }
};
if (recordPath) setInterval(flushRecord, 100).unref();

function started(payload) {
  const now = wallMs();
  if (stats.first_start_ms === null) stats.first_start_ms = now;
  stats.jobs += 1;
  if (payload && typeof payload.enqueued_ms === "number") {
    const latency = now - payload.enqueued_ms;
    // The endurance driver reads the record instead: a run of millions of
    // jobs would keep millions of numbers here.
    if (recordPath) recordLines.push(`${now.toFixed(3)} ${latency.toFixed(3)}\n`);
    else stats.latencies_ms.push(latency);
  }
}

async function runGraphile(mode, concurrency) {
  const { run, Logger, consoleLogFactory } = require("graphile-worker");
  // Its default logger prints a line per job; only warnings and errors here.
  const logger = new Logger((scope) => {
    const log = consoleLogFactory(scope);
    return (level, message) => (level === "warning" || level === "error" ? log(level, message) : undefined);
  });
  const pg = require("pg");
  const pool = new pg.Pool({ ...connection, max: concurrency + 2 });
  pool.on("error", (e) => console.error(`pool error: ${e.message}`));
  pool.on("connect", (client) => client.on("error", (e) => console.error(`connection error: ${e.message}`)));
  const worker = mode === "batched" ? { localQueue: { size: 500 }, completeJobBatchDelay: 0 } : {};
  const runner = await run({
    pgPool: pool,
    concurrency,
    noHandleSignals: true,
    logger,
    taskList: { noop: async (payload) => started(payload) },
    preset: { worker },
  });
  return async () => {
    await runner.stop();
    await pool.end();
  };
}

async function runPgBoss(workers, batchSize, pollingIntervalSeconds) {
  const PgBoss = require("pg-boss");
  const boss = new PgBoss({ ...connection, schedule: false, migrate: false });
  boss.on("error", (e) => console.error(`pg-boss error: ${e.message}`));
  await boss.start();
  for (let i = 0; i < workers; ++i) {
    await boss.work("noop", { batchSize, pollingIntervalSeconds }, async (jobs) => {
      for (const job of jobs) started(job.data);
    });
  }
  return async () => boss.stop({ graceful: false, wait: false });
}

const [system, ...options] = process.argv.slice(2);
let stop;
if (system === "graphile") {
  stop = await runGraphile(options[0], Number(options[1]));
} else if (system === "pgboss") {
  stop = await runPgBoss(Number(options[0]), Number(options[1]), Number(options[2]));
} else {
  console.error("usage: peer_worker.mjs graphile <batched|default> <concurrency> | pgboss <workers> <batchSize> <pollingIntervalSeconds>");
  process.exit(2);
}
process.on("SIGTERM", async () => {
  flushRecord();
  process.stdout.write(JSON.stringify(stats) + "\n");
  try {
    await stop();
  } finally {
    process.exit(0);
  }
});
console.log("ready");
