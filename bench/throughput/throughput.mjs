// The end-to-end throughput benchmark's driver (started by bench/throughput/run,
// which builds akadzed and the no-op plugin, installs the peers and starts a
// throwaway PostgreSQL). On that one PostgreSQL, in one run, it measures:
//
//  - akadzed burn-down: N ready jobs inserted first into a paused queue,
//    then the real daemon(s) (`akadzed run`, LISTEN on) with the no-op
//    plugin, and with a /bin/true shell handler; once every daemon listens,
//    the queue is resumed with a NOTIFY that wakes them together; jobs/s
//    from the first claim (min started_at) to the last finish (max
//    finished_at), the daemons' CPU time (/proc/<pid>/stat) and peak memory
//    (VmHWM), the server's CPU time, and per job the statements (round
//    trips) and commits the server saw (pg_stat_statements,
//    pg_stat_database), the claim index's entries read and how many of them
//    were live rows (pg_stat_user_indexes), the age of the oldest other
//    snapshot while it ran (pg_stat_activity, sampled with each poll), and
//    akadze.jobs's blocks found in shared buffers and read in
//    (pg_statio_user_tables);
//  - akadzed enqueue-to-start latency at steady arrival rates, with and
//    without LISTEN/NOTIFY: the enqueuer's wall clock at the INSERT (in the
//    job's args) against the plugin's wall clock when handle() starts;
//  - Graphile Worker (batched and default mode) and pg-boss burn-downs, and
//    Graphile Worker's latency, through bench/peers/peer_worker.mjs;
//  - the ceiling: pgbench with a one-row UPDATE ... RETURNING per
//    transaction at 2, 4 and 8 clients;
//  - the shell burn-down's ceiling: bench/spawn_ceiling, the daemon's shell
//    handler running /bin/true as many times at the same parallelism with
//    no database, right after the shell burn-down.
//
// Every burn-down's row also says how many of the machine's cores it kept
// busy (client and server CPU over its time) and the pace its CPU per job
// allows on all of them (the CPU ceiling): near it, CPU per job bounds the
// burn-down; far below it, something it waits for does. The CPU includes
// the daemons' (or workers') start and the driver's polls, which the
// seconds do not: busy cores read a few per cent high.
//
// Every burn-down and every akadzed latency run starts right after a
// CHECKPOINT, on a server whose max_wal_size no run reaches, and ends with
// a VACUUM (ANALYZE) of the tables it wrote: no checkpoint's writes, nor an
// autovacuum of an earlier run's dead rows, land in one run and not in
// another (a run during which a checkpoint started or an autovacuum ran
// says so in a warning under its line). Graphile Worker's latency run,
// pgbench and the spawn ceiling are not timed that way.
//
// It prints one table with the ratios and writes results.md, results.json,
// details.txt (top statements, settings) and throughput.dat (for
// throughput.gp) to $AKADZED_BENCH_OUT.
//
// Environment (set by the run script): PGHOST (the socket directory),
// PGPORT, PGUSER, AKADZED_BIN, AKADZED_NOOP_PLUGIN, AKADZED_SPAWN_CEILING, AKADZED_PEERS_DIR,
// AKADZED_BENCH_OUT, AKADZED_PG_DATA.
// Options: --jobs N --rates R1,R2 --latency-seconds S --pgbench-seconds S
//          --slots N --shell-slots N --poll-interval DURATION
//          --handlers plugin,plugin-delete,shell (plugin-delete: the plugin on a
//          queue with keep_succeeded: false)
//          --prefetch N --shell-prefetch N (queues[].prefetch of the plugin and
//          the shell burn-downs; default 0)
//          --finish-batch-delay D --shell-finish-batch-delay D
//          (worker.finish_batch_delay of the two; default 0s)
//          --shell-jobs N (the shell burn-down's jobs; default: --jobs)
//          --daemons N[,N...] (akadzed processes in a burn-down, each with
//          --slots and --prefetch; a list runs each burn-down once per count,
//          and the report compares each with the first, e.g. --daemons 1,2,4)
//          --only akadzed,latency,graphile,graphile-latency,pgboss,pgbench
//          --graphile-modes batched,default (Graphile Worker's burn-downs;
//          default mode runs ~12x slower: leave it out of 1,000,000-job runs)
//          --fillfactor N (akadze.jobs's fillfactor in akadzed's burn-downs;
//          default: the table's, 100; 60 gained nothing at 100,000 or
//          1,000,000 jobs, docs/benchmarks.md "seventh step")
//          --perf on (each akadzed burn-down under `perf record -a` from the
//          resume to the last finish: <out>/perf-<handler>-<daemons>.data,
//          and the top symbols by thread name, the server's and the
//          daemons', in <out>/perf-<handler>-<daemons>.txt; needs perf,
//          run as root)
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";

import { cpuSeconds, percentile, serverCpuSeconds } from "../lib/process_cpu.mjs";

const require = createRequire(`${process.env.AKADZED_PEERS_DIR}/package.json`);
const pg = require("pg");

// ---- options ----

const defaults = {
  jobs: 100000,
  rates: "200,1000",
  "latency-seconds": 20,
  "pgbench-seconds": 10,
  slots: 1000,
  "shell-slots": 8,
  prefetch: 0,
  "shell-prefetch": 0,
  "finish-batch-delay": "0s",
  "shell-finish-batch-delay": "0s",
  "poll-interval": "100ms",
  handlers: "plugin,shell",
  "shell-jobs": 0,
  daemons: 1,
  only: "akadzed,latency,graphile,graphile-latency,pgboss,pgbench",
  "graphile-modes": "batched,default",
  fillfactor: 0,
  perf: "off",
};
const opts = { ...defaults };
for (let i = 2; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, "");
  if (!(key in defaults) || i + 1 >= process.argv.length) {
    console.error(`unknown option or missing value: ${process.argv[i]}`);
    process.exit(2);
  }
  opts[key] = process.argv[i + 1];
}
const N = Number(opts.jobs);
const rates = String(opts.rates).split(",").map(Number);
const only = new Set(String(opts.only).split(","));
const daemonCounts = String(opts.daemons).split(",").map(Number);
if (daemonCounts.some((d) => !Number.isInteger(d) || d < 1)) {
  throw new Error(`--daemons: expected counts of at least 1 separated by commas, got '${opts.daemons}'`);
}
const outDir = process.env.AKADZED_BENCH_OUT;
fs.mkdirSync(outDir, { recursive: true });
const peerWorker = path.join(path.dirname(fileURLToPath(import.meta.url)), "../peers/peer_worker.mjs");
const details = [];
const note = (line) => {
  details.push(line);
  console.log(line);
};

// ---- small helpers ----

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const wallMs = () => performance.timeOrigin + performance.now();
const load = () => fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
const connection = (database) => ({
  host: process.env.PGHOST,
  port: Number(process.env.PGPORT),
  user: process.env.PGUSER,
  database,
});
const conninfo = (database) =>
  `host=${process.env.PGHOST} port=${process.env.PGPORT} user=${process.env.PGUSER} dbname=${database}`;

async function connect(database) {
  const client = new pg.Client(connection(database));
  await client.connect();
  return client;
}

function vmHwmMb(pid) {
  const line = fs.readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmHWM:"));
  return Number(line.split(/\s+/)[1]) / 1024;
}

function latencySummary(latencies) {
  const sorted = [...latencies].sort((a, b) => a - b);
  return {
    count: sorted.length,
    p50: percentile(sorted, 50),
    p95: percentile(sorted, 95),
    p99: percentile(sorted, 99),
    max: sorted[sorted.length - 1],
  };
}

// Waits until `condition()` resolves true, checking every `everyMs` (a number
// of ms, or a function giving the next wait).
async function waitFor(condition, everyMs, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(typeof everyMs === "function" ? everyMs() : everyMs);
  }
}

// How long a burn-down of `jobs` may take: at least 50 jobs/s.
const burnDownTimeoutMs = (jobs = N) => 60000 + jobs * 20;

// Children still running; killed if the driver exits early.
const liveChildren = new Set();
process.on("exit", () => liveChildren.forEach((child) => child.kill("SIGKILL")));

// A child process whose output is kept; `ready` resolves at a line containing `readyText`.
function startChild(argv, env, name, readyText) {
  const child = spawn(argv[0], argv.slice(1), { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  liveChildren.add(child);
  child.on("exit", () => liveChildren.delete(child));
  let output = "";
  let resolveReady;
  const ready = new Promise((resolve) => (resolveReady = resolve));
  const onData = (data) => {
    output += data.toString();
    if (readyText && output.includes(readyText)) resolveReady();
  };
  child.stdout.on("data", onData);
  child.stderr.on("data", onData);
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve(code ?? 128 + os.constants.signals[signal])));
  if (!readyText) resolveReady();
  return { child, ready, exited, output: () => output, name };
}

async function stopChild(proc, timeoutMs = 30000) {
  proc.child.kill("SIGTERM");
  const code = await Promise.race([proc.exited, sleep(timeoutMs).then(() => "timeout")]);
  if (code === "timeout") {
    proc.child.kill("SIGKILL");
    throw new Error(`${proc.name} did not stop within ${timeoutMs} ms:\n${proc.output().slice(-2000)}`);
  }
  return code;
}

// ---- what the server saw: statements and commits per database ----

// Driver queries carry this comment so that they can be told apart.
const TAG = "/* akadzed-bench */";

async function serverCounters(admin, database) {
  const commits = await admin.query(
    `${TAG} SELECT xact_commit::int8 AS commits, xact_rollback::int8 AS rollbacks FROM pg_stat_database WHERE datname = $1`,
    [database]);
  const statements = await admin.query(
    `${TAG} SELECT coalesce(sum(calls), 0)::int8 AS calls FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
      WHERE d.datname = $1 AND s.query NOT LIKE '%akadzed-bench%'`,
    [database]);
  return { commits: Number(commits.rows[0].commits), rollbacks: Number(commits.rows[0].rollbacks), calls: Number(statements.rows[0].calls) };
}

// Checkpoints started so far, timed or requested (pg_stat_bgwriter; from
// PostgreSQL 17 pg_stat_checkpointer).
async function checkpointCount(admin) {
  const v17 = (await admin.query(`${TAG} SELECT to_regclass('pg_catalog.pg_stat_checkpointer') IS NOT NULL AS v`)).rows[0].v;
  const r = await admin.query(v17
    ? `${TAG} SELECT (num_timed + num_requested)::int8 AS n FROM pg_stat_checkpointer`
    : `${TAG} SELECT (checkpoints_timed + checkpoints_req)::int8 AS n FROM pg_stat_bgwriter`);
  return Number(r.rows[0].n);
}

async function claimIndexCounters(db) {
  const r = await db.query(`${TAG} SELECT i.idx_tup_read::int8 AS read, i.idx_tup_fetch::int8 AS fetched,
                                     (t.heap_blks_read + t.idx_blks_read)::int8 AS blks_read,
                                     (t.heap_blks_hit + t.idx_blks_hit)::int8 AS blks_hit
                              FROM pg_stat_user_indexes i, pg_statio_user_tables t
                              WHERE i.indexrelid = 'akadze.jobs_claim_idx'::regclass AND t.relid = 'akadze.jobs'::regclass`);
  const row = r.rows[0];
  return { read: Number(row.read), fetched: Number(row.fetched), blks_read: Number(row.blks_read), blks_hit: Number(row.blks_hit) };
}

// The oldest snapshot among the database's sessions other than `db`'s own,
// as the age in transaction ids of its xmin: rows dead since then cannot
// be pruned nor their index entries killed.
async function oldestSnapshotAge(db) {
  const r = await db.query(`${TAG} SELECT coalesce(max(age(backend_xmin)), 0)::int8 AS age FROM pg_stat_activity
                              WHERE datname = current_database() AND pid <> pg_backend_pid()`);
  return Number(r.rows[0].age);
}

async function topStatements(admin, database, limit = 8) {
  const result = await admin.query(
    `${TAG} SELECT calls, rows, round(total_exec_time::numeric, 1) AS total_ms, round(mean_exec_time::numeric, 3) AS mean_ms,
            round(total_plan_time::numeric, 1) AS plan_ms,
            left(regexp_replace(query, '\\s+', ' ', 'g'), 150) AS query
       FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
      WHERE d.datname = $1 AND s.query NOT LIKE '%akadzed-bench%' ORDER BY total_exec_time DESC LIMIT $2`,
    [database, limit]);
  return result.rows;
}

// Runs `body` between two readings of the counters; `driverQueries()` says how
// many autocommit statements the driver itself sent to `database` meanwhile
// (they count as commits in pg_stat_database).
// `db` (a client on `database`, for akadzed's): also what the claim index
// (akadze.jobs_claim_idx) returned to scans and how many of those entries led
// to a live row; the rest are entries of rows no longer queued that the scans
// walked because they could not be killed yet.
// `tables`: the tables the run writes (in `database`). They are vacuumed
// and analyzed once the counters are read, so that no autovacuum or
// autoanalyze of what this run left starts inside a later run (its CPU
// counted as that run's, its work taking a core from it).
// result.warnings (printed under the run's line by printWarnings): a
// checkpoint started while it ran, or an autovacuum worker seen (sampled
// every 100 ms: one shorter than that may go unseen, and costs less).
async function withServerCounters(admin, database, body, db = null, tables = []) {
  // The dirty pages of the setup (and of earlier runs) are written now, not
  // by a checkpoint that lands in the timed window of whichever run it falls
  // in (the server runs with a max_wal_size no run reaches, so none starts
  // there on its own): its CPU counted as that run's and its writes taking
  // a core from it.
  await admin.query(`${TAG} CHECKPOINT`);
  await admin.query(`${TAG} SELECT pg_stat_statements_reset()`);
  await sleep(1100);  // pending statistics of earlier runs are flushed
  const checkpointsBefore = await checkpointCount(admin);
  const before = await serverCounters(admin, database);
  const indexBefore = db ? await claimIndexCounters(db) : null;
  const cpuBefore = serverCpuSeconds();
  const autovacuums = new Set();
  let samplerErrors = 0;
  let sampling = Promise.resolve();
  const sampler = setInterval(() => {
    sampling = sampling.then(async () => {
      const r = await admin.query(`${TAG} SELECT datname, query FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'`);
      for (const row of r.rows) if (row.query) autovacuums.add(`${row.datname}: ${row.query}`);
    }).catch(() => { samplerErrors += 1; });
  }, 100);
  let result;
  try {
    result = await body();
  } finally {
    clearInterval(sampler);
    await sampling;
  }
  const serverCpu = serverCpuSeconds() - cpuBefore;
  await sleep(1100);
  const after = await serverCounters(admin, database);
  if (db) {
    const indexAfter = await claimIndexCounters(db);
    result.claim_index_read_per_job = (indexAfter.read - indexBefore.read) / result.jobs;
    result.claim_index_fetched_per_job = (indexAfter.fetched - indexBefore.fetched) / result.jobs;
    result.jobs_blocks_read_per_job = (indexAfter.blks_read - indexBefore.blks_read) / result.jobs;
    result.jobs_blocks_hit_per_job = (indexAfter.blks_hit - indexBefore.blks_hit) / result.jobs;
  }
  const jobs = result.jobs;
  result.server_cpu_s = serverCpu;
  result.statements_per_job = (after.calls - before.calls) / jobs;
  result.commits_per_job = (after.commits - before.commits - (result.driver_queries ?? 0)) / jobs;
  result.rollbacks = after.rollbacks - before.rollbacks;
  result.checkpoints = (await checkpointCount(admin)) - checkpointsBefore;
  result.autovacuums = [...autovacuums];
  result.warnings = [];
  if (result.checkpoints > 0) result.warnings.push(`${result.checkpoints} checkpoint(s) started while this ran: its server CPU and pace include them`);
  if (autovacuums.size > 0) result.warnings.push(`autovacuum ran while this ran (its server CPU and pace include it): ${result.autovacuums.join("; ")}`);
  if (samplerErrors > 0) result.warnings.push(`${samplerErrors} of the autovacuum samples failed: an autovacuum may have gone unseen`);
  if (tables.length > 0) {
    const own = await connect(database);
    try {
      await own.query(`${TAG} VACUUM (ANALYZE) ${tables.join(", ")}`);
    } finally {
      await own.end();
    }
  }
  result.top = await topStatements(admin, database);
  return result;
}

function printWarnings(r) {
  for (const w of r.warnings ?? []) note(`  warning: ${w}`);
}

function printTop(label, top) {
  note(`  top statements of ${label} (pg_stat_statements, by total execution time):`);
  for (const row of top) {
    note(`    calls=${row.calls} rows=${row.rows} total_ms=${row.total_ms} mean_ms=${row.mean_ms} plan_ms=${row.plan_ms} | ${row.query}`);
  }
}

// ---- steady arrivals ----

// Calls `enqueue(k)` for k = 0 .. rate*seconds-1 at `rate` per second on a
// fixed schedule (not waiting for earlier calls); resolves when all are done.
async function steadyArrivals(rate, seconds, enqueue) {
  const total = Math.round(rate * seconds);
  const inflight = [];
  const start = wallMs() + 20;
  for (let k = 0; k < total; ++k) {
    const wait = start + (k * 1000) / rate - wallMs();
    if (wait >= 1) await sleep(wait);
    inflight.push(enqueue(k));
  }
  await Promise.all(inflight);
  return total;
}

// ---- akadzed ----

const AKADZED_DB = "akadzed";

function akadzedConfig({ handler, slots, prefetch = 0, finishBatchDelay = "0s", pollInterval, listen, record, keepSucceeded = true }) {
  const plugin = record
    ? `{path: "${process.env.AKADZED_NOOP_PLUGIN}", config: {record: "${record}"}}`
    : `{path: "${process.env.AKADZED_NOOP_PLUGIN}"}`;
  return [
    `database: {url: "${conninfo(AKADZED_DB)}"}`,
    "worker:",
    `  poll_interval: ${pollInterval}`,
    `  listen_notify: ${listen}`,
    // Only when set: a binary from before the key (a baseline) rejects it.
    ...(finishBatchDelay === "0s" ? [] : [`  finish_batch_delay: ${finishBatchDelay}`]),
    "queues:",
    // keep_succeeded only when false: a binary from before the key rejects it.
    `  - {name: bench, slots: ${slots}, prefetch: ${prefetch}${keepSucceeded ? "" : ", keep_succeeded: false"}}`,
    "handlers:",
    handler === "shell" ? '  noop: {shell: {command: ["/bin/true"]}}' : `  noop: {plugin: ${plugin}}`,
    "pruning: {enabled: false}",
    "logging: {level: warn}",
    // Metrics stay on, as in production, on a free port: several daemons
    // (--daemons) and other programs on this machine may run at once.
    'metrics: {listen: "127.0.0.1:0"}',
    "",
  ].join("\n");
}

function startDaemon(name, config) {
  const file = path.join(outDir, `${name}.yaml`);
  fs.writeFileSync(file, config);
  return startChild([process.env.AKADZED_BIN, "run", "--config", file], {}, `akadzed (${name})`, null);
}

// `perf record -a` (all CPUs, 999 Hz, no call graphs) into <out>/<name>.data
// until stop(), which writes the top symbols by thread name (the server's
// backends, the daemons' threads) to <out>/<name>.txt.
async function startPerf(name) {
  const data = path.join(outDir, `${name}.data`);
  const child = spawn("perf", ["record", "-a", "-F", "999", "-o", data], { stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  child.stderr.on("data", (d) => { err += d; });
  const exited = new Promise((resolve) => child.on("exit", resolve));
  // perf has no ready signal: its first samples come within a few ms.
  await sleep(300);
  if (child.exitCode !== null) throw new Error(`perf record failed: ${err.trim()}`);
  return {
    async stop() {
      child.kill("SIGINT");
      await exited;
      // By thread name: the server's backends are "postgres", the daemon's
      // threads carry their roles ("claim Q", "exec Q", "finisher", ...).
      const text = execFileSync("perf", ["report", "-i", data, "--no-children", "--sort", "comm,dso,sym",
        "--stdio", "--percent-limit", "0.3"], { maxBuffer: 64 << 20, stdio: ["ignore", "pipe", "ignore"] }).toString();
      fs.writeFileSync(path.join(outDir, `${name}.txt`), text);
      note(`perf: ${data}, top symbols in ${path.join(outDir, `${name}.txt`)}`);
    },
  };
}

// `handler`: "plugin", "shell", or "plugin-delete" (the plugin on a queue
// with keep_succeeded: false, whose jobs are deleted as they succeed).
async function akadzedBurnDown(admin, db, handlerName, daemonCount) {
  const keepSucceeded = handlerName !== "plugin-delete";
  const handler = keepSucceeded ? handlerName : "plugin";
  const slots = handler === "shell" ? Number(opts["shell-slots"]) : Number(opts.slots);
  const prefetch = handler === "shell" ? Number(opts["shell-prefetch"]) : Number(opts.prefetch);
  const finishBatchDelay = handler === "shell" ? opts["shell-finish-batch-delay"] : opts["finish-batch-delay"];
  const N = handler === "shell" && Number(opts["shell-jobs"]) > 0 ? Number(opts["shell-jobs"]) : Number(opts.jobs);
  await db.query(`${TAG} TRUNCATE akadze.jobs`);
  if (Number(opts.fillfactor) > 0) await db.query(`${TAG} ALTER TABLE akadze.jobs SET (fillfactor = ${Number(opts.fillfactor)})`);
  // The daemons start on a paused queue and the burn-down begins when all
  // of them are up and listening: one NOTIFY in the resuming transaction
  // wakes them together. So a daemon's start (connections, its first
  // statements) is not counted against the burn-down of the others.
  await db.query(`${TAG} INSERT INTO akadze.queue_pauses (queue) VALUES ('bench') ON CONFLICT DO NOTHING`);
  await db.query(`${TAG} INSERT INTO akadze.jobs (task, queue) SELECT 'noop', 'bench' FROM generate_series(1, $1)`, [N]);
  await db.query(`${TAG} VACUUM ANALYZE akadze.jobs`);
  const loadAvg = load();
  const result = await withServerCounters(admin, AKADZED_DB, async () => {
    let polls = 0;
    const config = akadzedConfig({ handler, slots, prefetch, finishBatchDelay, pollInterval: opts["poll-interval"], listen: true, keepSucceeded });
    const daemons = Array.from({ length: daemonCount }, (_, i) => startDaemon(`burn-down-${handlerName}-${i + 1}`, config));
    await waitFor(async () => {
      const exited = daemons.find((d) => d.child.exitCode !== null);
      if (exited) throw new Error(`akadzed exited:\n${exited.output().slice(-2000)}`);
      // Each daemon's listener is a session of its own, named "akadzed
      // listen", idle once it listens (its last statement comes after LISTEN).
      const r = await db.query(`${TAG} SELECT count(*)::int AS n FROM pg_stat_activity
                                  WHERE datname = current_database() AND application_name = 'akadzed listen'
                                    AND state = 'idle' AND query <> ''`);
      return r.rows[0].n === daemonCount;
    }, 10, 60000, `${daemonCount} akadzed daemons to listen`);
    const perf = opts.perf === "on" ? await startPerf(`perf-${handlerName}-${daemonCount}`) : null;
    await db.query(`${TAG} WITH resumed AS (DELETE FROM akadze.queue_pauses WHERE queue = 'bench')
                     SELECT pg_notify('akadze_jobs', 'bench')`);
    // Jobs that are deleted as they succeed leave no started_at or
    // finished_at: the first start is read from the first claim's running
    // rows (polled every 5 ms until seen; a claim's rows share its
    // started_at and live for tens of ms), the last finish is when the table
    // is seen empty (every 25 ms, as for Graphile Worker's).
    let firstStart = null;
    let end = 0;
    const snapshotAges = [];
    await waitFor(async () => {
      polls += 1;
      const left = await db.query(`${TAG} SELECT EXISTS (SELECT 1 FROM akadze.jobs WHERE state = 'queued')
                                    OR EXISTS (SELECT 1 FROM akadze.jobs WHERE state = 'running') AS left,
                                    extract(epoch FROM (SELECT min(started_at) FROM akadze.jobs WHERE state = 'running')) * 1000 AS first_ms`);
      end = wallMs();
      if (firstStart === null && left.rows[0].first_ms !== null) firstStart = Number(left.rows[0].first_ms);
      snapshotAges.push(await oldestSnapshotAge(db));
      const exited = daemons.find((d) => d.child.exitCode !== null);
      if (exited) throw new Error(`akadzed exited:\n${exited.output().slice(-2000)}`);
      return !left.rows[0].left;
    }, () => (keepSucceeded ? 100 : firstStart === null ? 5 : 25), burnDownTimeoutMs(N), `akadzed (${handlerName}) to finish ${N} jobs`);
    if (perf) await perf.stop();
    const cpu = daemons.reduce((sum, d) => sum + cpuSeconds(d.child.pid), 0);
    const hwm = daemons.reduce((sum, d) => sum + vmHwmMb(d.child.pid), 0);
    for (const d of daemons) await stopChild(d);
    const row = (await db.query(`${TAG} SELECT count(*) FILTER (WHERE state = 'succeeded')::int8 AS succeeded,
        count(*)::int8 AS kept, extract(epoch FROM max(finished_at) - min(started_at))::float8 AS seconds FROM akadze.jobs`)).rows[0];
    if (keepSucceeded && Number(row.succeeded) !== N) throw new Error(`akadzed (${handlerName}): ${row.succeeded} of ${N} jobs succeeded`);
    // Deleted as they succeeded: none may be left (a failed or retried job stays).
    if (!keepSucceeded && Number(row.kept) !== 0) throw new Error(`akadzed (${handlerName}): ${row.kept} of ${N} jobs left`);
    if (!keepSucceeded) row.seconds = (end - firstStart) / 1000;
    snapshotAges.sort((a, b) => a - b);
    return { jobs: N, seconds: row.seconds, jobs_per_s: N / row.seconds, cpu_s: cpu, vm_hwm_mb: hwm,
             driver_queries: 2 * polls + 2, slots, prefetch, daemons: daemonCount,
             snapshot_age_p50: snapshotAges[Math.floor(snapshotAges.length / 2)] ?? 0,
             snapshot_age_max: snapshotAges[snapshotAges.length - 1] ?? 0 };
  }, db, ["akadze.jobs"]);
  result.load = loadAvg;
  return result;
}

async function akadzedLatency(db, { rate, listen }) {
  const seconds = Number(opts["latency-seconds"]);
  const record = path.join(outDir, `latency-${rate}-${listen ? "listen" : "poll"}.txt`);
  fs.rmSync(record, { force: true });
  await db.query(`${TAG} TRUNCATE akadze.jobs`);
  const daemon = startDaemon(`latency-${rate}-${listen ? "listen" : "poll"}`,
    akadzedConfig({ handler: "plugin", slots: Number(opts.slots), pollInterval: opts["poll-interval"], listen, record }));
  await sleep(1500);  // registered, claim loop and listener running
  const loadAvg = load();
  const enqueuers = await Promise.all([1, 2, 3, 4].map(() => connect(AKADZED_DB)));
  // With LISTEN, the producer notifies in the INSERT's own transaction.
  const sql = listen
    ? `${TAG} WITH j AS (INSERT INTO akadze.jobs (task, queue, args) VALUES ('noop', 'bench', $1) RETURNING id)
       SELECT pg_notify('akadze_jobs', 'bench') FROM j`
    : `${TAG} INSERT INTO akadze.jobs (task, queue, args) VALUES ('noop', 'bench', $1)`;
  const total = await steadyArrivals(rate, seconds, (k) =>
    enqueuers[k % enqueuers.length].query(sql, [JSON.stringify({ enqueued_ms: wallMs() })]));
  await waitFor(async () => fs.existsSync(record) && fs.readFileSync(record, "utf8").split("\n").length > total,
    100, 60000, "every latency job to start");
  const cpu = cpuSeconds(daemon.child.pid);
  await stopChild(daemon);
  await Promise.all(enqueuers.map((c) => c.end()));
  // Two origins: the enqueuer's clock when it sent the INSERT (as for the
  // peers), and the INSERT's transaction start (created_at), which leaves out
  // the time a query waited in the enqueuer's connection.
  const enqueued = new Map((await db.query(`${TAG} SELECT id, (args->>'enqueued_ms')::float8 AS sent,
      extract(epoch FROM created_at)::float8 * 1000 AS created FROM akadze.jobs`)).rows.map((r) => [String(r.id), r]));
  const fromSend = [];
  const fromInsert = [];
  for (const line of fs.readFileSync(record, "utf8").trim().split("\n")) {
    const [id, startUs] = line.split(" ");
    fromSend.push(Number(startUs) / 1000 - enqueued.get(id).sent);
    fromInsert.push(Number(startUs) / 1000 - enqueued.get(id).created);
  }
  return { rate, listen, seconds, cpu_s: cpu, load: loadAvg, driver_queries: total + 2,
           from_insert: latencySummary(fromInsert), ...latencySummary(fromSend) };
}

// The shell burn-down's ceiling: bench/spawn_ceiling (the daemon's shell
// handler on /bin/true, no database) for as many jobs at the same parallelism.
function spawnCeiling(jobs, parallel) {
  let out;
  try {
    out = execFileSync(process.env.AKADZED_SPAWN_CEILING,
      ["--jobs", String(jobs), "--parallel", String(parallel), "--command", "/bin/true"]).toString();
  } catch (e) {
    // Exit 1: some runs failed; the figures (with failed=N) are still printed.
    if (!e.stdout?.length) throw e;
    out = e.stdout.toString();
    console.error(`spawn_ceiling: ${out.trim()}`);
  }
  const figures = Object.fromEntries(out.trim().split(" ").map((kv) => kv.split("=")).map(([k, v]) => [k, Number(v)]));
  return { ...figures, load: load() };
}

// ---- the peers ----

const peerEnv = (database) => ({ PGDATABASE: database });

async function graphilePrepare(jobs) {
  const { runMigrations, makeWorkerUtils } = require("graphile-worker");
  const pool = new pg.Pool({ ...connection("graphile"), max: 4 });
  pool.on("error", (e) => console.error(`pool error: ${e.message}`));
  pool.on("connect", (client) => client.on("error", (e) => console.error(`connection error: ${e.message}`)));
  await runMigrations({ pgPool: pool });
  await pool.query(`${TAG} DELETE FROM graphile_worker._private_jobs`);
  const utils = await makeWorkerUtils({ pgPool: pool });
  for (let done = 0; done < jobs; done += 10000) {
    const chunk = Math.min(10000, jobs - done);
    await utils.addJobs(Array.from({ length: chunk }, () => ({ identifier: "noop", payload: {} })));
  }
  await utils.release();
  await pool.query(`${TAG} VACUUM ANALYZE graphile_worker._private_jobs`);
  await pool.end();
}

// Starts `count` peer worker processes and waits until each is ready.
async function startPeerWorkers(count, args, database, name) {
  const workers = [];
  for (let i = 0; i < count; ++i) {
    workers.push(startChild(["node", peerWorker, ...args], peerEnv(database), `${name} #${i + 1}`, "ready"));
  }
  await Promise.race([Promise.all(workers.map((w) => w.ready)),
    ...workers.map((w) => w.exited.then((code) => { throw new Error(`${w.name} exited (${code}):\n${w.output()}`); }))]);
  return workers;
}

// Stops the workers; returns their CPU seconds, peak memory (sum) and stats.
async function stopPeerWorkers(workers) {
  const cpu = workers.reduce((sum, w) => sum + cpuSeconds(w.child.pid), 0);
  const hwm = workers.reduce((sum, w) => sum + vmHwmMb(w.child.pid), 0);
  const stats = [];
  for (const w of workers) {
    await stopChild(w);
    const line = w.output().split("\n").find((l) => l.startsWith("{"));
    if (!line) throw new Error(`${w.name} printed no stats:\n${w.output().slice(-2000)}`);
    stats.push(JSON.parse(line));
  }
  return { cpu_s: cpu, vm_hwm_mb: hwm, stats };
}

async function graphileBurnDown(admin, mode, processes) {
  await graphilePrepare(N);
  const db = await connect("graphile");
  const loadAvg = load();
  const result = await withServerCounters(admin, "graphile", async () => {
    const workers = await startPeerWorkers(processes, ["graphile", mode, "24"], "graphile", `graphile ${mode}`);
    let polls = 0;
    let end = 0;
    // Graphile Worker deletes a job when it completes: the last finish is when
    // the table is seen empty (checked every 25 ms, so up to 25 ms late).
    await waitFor(async () => {
      polls += 1;
      const left = await db.query(`${TAG} SELECT id FROM graphile_worker._private_jobs ORDER BY id DESC LIMIT 1`);
      end = wallMs();
      return left.rows.length === 0;
    }, 25, burnDownTimeoutMs(), `Graphile Worker (${mode}) to finish ${N} jobs`).catch((e) => {
      throw new Error(`${e.message}; its output:\n${workers.map((w) => w.output().slice(-3000)).join("\n")}`);
    });
    const stopped = await stopPeerWorkers(workers);
    const first = Math.min(...stopped.stats.filter((s) => s.first_start_ms).map((s) => s.first_start_ms));
    const ran = stopped.stats.reduce((sum, s) => sum + s.jobs, 0);
    if (ran < N) throw new Error(`Graphile Worker (${mode}) ran ${ran} of ${N} jobs`);
    const seconds = (end - first) / 1000;
    return { jobs: N, seconds, jobs_per_s: N / seconds, cpu_s: stopped.cpu_s, vm_hwm_mb: stopped.vm_hwm_mb,
             driver_queries: polls };
  }, null, ["graphile_worker._private_jobs"]);
  await db.end();
  result.load = loadAvg;
  result.processes = processes;
  return result;
}

async function graphileLatency(rate) {
  const seconds = Number(opts["latency-seconds"]);
  await graphilePrepare(0);
  const { makeWorkerUtils } = require("graphile-worker");
  const pool = new pg.Pool({ ...connection("graphile"), max: 4 });
  pool.on("error", (e) => console.error(`pool error: ${e.message}`));
  pool.on("connect", (client) => client.on("error", (e) => console.error(`connection error: ${e.message}`)));
  const utils = await makeWorkerUtils({ pgPool: pool });
  const workers = await startPeerWorkers(1, ["graphile", "default", "24"], "graphile", "graphile latency");
  await sleep(1500);
  const loadAvg = load();
  const total = await steadyArrivals(rate, seconds, () => utils.addJob("noop", { enqueued_ms: wallMs() }));
  await waitFor(async () => (await pool.query(`${TAG} SELECT count(*)::int AS n FROM graphile_worker._private_jobs`)).rows[0].n === 0,
    100, 60000, "Graphile Worker to run every latency job");
  const stopped = await stopPeerWorkers(workers);
  await utils.release();
  await pool.end();
  const latencies = stopped.stats.flatMap((s) => s.latencies_ms);
  if (latencies.length !== total) throw new Error(`Graphile Worker latency: ${latencies.length} of ${total} jobs seen`);
  return { rate, listen: true, seconds, cpu_s: stopped.cpu_s, load: loadAvg, ...latencySummary(latencies) };
}

async function pgbossBurnDown(admin) {
  const PgBoss = require("pg-boss");
  const boss = new PgBoss({ ...connection("pgboss"), schedule: false, supervise: false });
  boss.on("error", (e) => console.error(`pg-boss error: ${e.message}`));
  await boss.start();
  await boss.deleteQueue("noop").catch(() => {});
  await boss.getDb().executeSql(`${TAG} DELETE FROM pgboss.job WHERE name = 'noop'`);
  await boss.createQueue("noop");
  for (let done = 0; done < N; done += 10000) {
    const chunk = Math.min(10000, N - done);
    await boss.insert(Array.from({ length: chunk }, () => ({ name: "noop", data: {} })));
  }
  await boss.stop({ graceful: false, wait: true });
  const db = await connect("pgboss");
  await db.query(`${TAG} VACUUM ANALYZE pgboss.job`);
  const loadAvg = load();
  const result = await withServerCounters(admin, "pgboss", async () => {
    const workers = await startPeerWorkers(1, ["pgboss", "4", "10000", "0.5"], "pgboss", "pg-boss");
    let polls = 0;
    await waitFor(async () => {
      polls += 1;
      const left = await db.query(`${TAG} SELECT count(*)::int AS n FROM pgboss.job WHERE name = 'noop' AND state <> 'completed'`);
      return left.rows[0].n === 0;
    }, 100, burnDownTimeoutMs(), `pg-boss to finish ${N} jobs`).catch((e) => {
      throw new Error(`${e.message}; its output:\n${workers[0].output().slice(-3000)}`);
    });
    const stopped = await stopPeerWorkers(workers);
    // pg-boss keeps completed jobs: its own timestamps, like akadzed's.
    const row = (await db.query(`${TAG} SELECT count(*)::int8 AS n,
        extract(epoch FROM max(completed_on) - min(started_on))::float8 AS seconds
        FROM pgboss.job WHERE name = 'noop' AND state = 'completed'`)).rows[0];
    if (Number(row.n) !== N) throw new Error(`pg-boss: ${row.n} of ${N} jobs completed`);
    return { jobs: N, seconds: row.seconds, jobs_per_s: N / row.seconds, cpu_s: stopped.cpu_s,
             vm_hwm_mb: stopped.vm_hwm_mb, driver_queries: polls + 1 };
  }, null, ["pgboss.job"]);
  await db.end();
  result.load = loadAvg;
  return result;
}

// ---- the ceiling: pgbench ----

async function pgbenchCeiling(admin) {
  const db = await connect("pgbench");
  await db.query(`${TAG} DROP TABLE IF EXISTS bench_rows`);
  await db.query(`${TAG} CREATE TABLE bench_rows (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)`);
  await db.query(`${TAG} INSERT INTO bench_rows (id) SELECT generate_series(1, 100000)`);
  await db.query(`${TAG} VACUUM ANALYZE bench_rows`);
  await db.end();
  const script = path.join(outDir, "update_returning.sql");
  fs.writeFileSync(script, "\\set id random(1, 100000)\nUPDATE bench_rows SET n = n + 1 WHERE id = :id RETURNING n;\n");
  const results = [];
  for (const clients of [2, 4, 8]) {
    const loadAvg = load();
    const out = execFileSync("pgbench", ["-n", "-M", "prepared", "-f", script, "-c", String(clients), "-j", "2",
      "-T", String(opts["pgbench-seconds"]), "-h", process.env.PGHOST, "-p", process.env.PGPORT,
      "-U", process.env.PGUSER, "pgbench"]).toString();
    const tps = Number(/tps = ([\d.]+)/.exec(out)[1]);
    results.push({ clients, tps, load: loadAvg });
    note(`pgbench UPDATE ... RETURNING, ${clients} clients: ${tps.toFixed(0)} tps (load ${loadAvg})`);
  }
  return results;
}

// ---- the report ----

// The burn-downs: their key in the results, row label and bar label (gnuplot: \n breaks).
const BURN_DOWNS = [
  { key: "akadzed_plugin", label: "akadzed, no-op plugin", bar: "akadzed\\nplugin" },
  { key: "akadzed_plugin-delete", label: "akadzed, no-op plugin, keep_succeeded: false", bar: "akadzed\\nplugin,\\nno keep" },
  { key: "akadzed_shell", label: "akadzed, /bin/true shell", bar: "akadzed\\n/bin/true" },
  { key: "graphile_batched", label: "Graphile Worker 0.17.3, batched (2 processes)", bar: "Graphile\\nbatched" },
  { key: "graphile_default", label: "Graphile Worker 0.17.3, default (2 processes)", bar: "Graphile\\ndefault" },
  { key: "pgboss", label: "pg-boss 10.4.2 (4 x work(), batchSize 10,000)", bar: "pg-boss" },
];

// The rows of the table: each burn-down, and after an akadzed one its runs
// with other daemon counts (--daemons with a list; keys "<key>_x<count>").
function burnDownRows(r) {
  const rows = [];
  for (const { key, label } of BURN_DOWNS) {
    if (r[key]) rows.push({ key, label, x: r[key] });
    for (const other of Object.keys(r).filter((k) => k.startsWith(`${key}_x`)).sort((a, b) => r[a].daemons - r[b].daemons)) {
      rows.push({ key: other, label, x: r[other] });
    }
  }
  return rows;
}

const fmt = (v, digits = 0) => (v === undefined || Number.isNaN(v) ? "-" : Number(v).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits }));
const ratio = (a, b) => (a && b ? `${(a / b).toFixed(2)}x` : "-");
// Of the machine's cores, how many a burn-down kept busy (its client's and
// the server's CPU over its time), and the pace its CPU per job allows on
// all of them: a burn-down near that ceiling is bound by CPU per job, one
// far below it by something it waits for.
// A row without either CPU figure gives NaN (undefined + a number), which
// fmt prints as "-".
const coresBusy = (x) => (x.cpu_s + x.server_cpu_s) / x.seconds;
const cpuCeiling = (x) => (os.cpus().length * x.jobs) / (x.cpu_s + x.server_cpu_s);

function report(r) {
  const lines = [];
  const fastestPeer = Math.max(r.graphile_batched?.jobs_per_s ?? 0, r.graphile_default?.jobs_per_s ?? 0, r.pgboss?.jobs_per_s ?? 0);
  const ceiling = r.pgbench ? Math.max(...r.pgbench.map((p) => p.tps)) : undefined;
  const plugin = r.akadzed_plugin?.jobs_per_s;
  lines.push(`End-to-end throughput, ${N.toLocaleString("en-US")} jobs (${new Date().toISOString()}, ${os.cpus().length} cores)`);
  lines.push("");
  lines.push(`| burn-down | jobs/s | seconds | akadzed plugin / this | client CPU s | server CPU s | cores busy (of ${os.cpus().length}) | CPU ceiling jobs/s | peak RSS MB | statements/job | commits/job | load (1/5/15 min) |`);
  lines.push("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
  for (const { key, label: name, x } of burnDownRows(r)) {
    const jobs = x.jobs === N ? "" : ` (${x.jobs.toLocaleString("en-US")} jobs)`;
    const label = x.daemons > 1 ? `${name}, ${x.daemons} daemons` : name;
    lines.push(`| ${label}${jobs} | ${fmt(x.jobs_per_s)} | ${fmt(x.seconds, 2)} | ${ratio(plugin, x.jobs_per_s)} | ${fmt(x.cpu_s, 2)} | ${fmt(x.server_cpu_s, 2)} | ${fmt(coresBusy(x), 2)} | ${fmt(cpuCeiling(x))} | ${fmt(x.vm_hwm_mb, 1)} | ${fmt(x.statements_per_job, 3)} | ${fmt(x.commits_per_job, 3)} | ${x.load} |`);
  }
  if (ceiling) {
    const best = r.pgbench.reduce((a, b) => (b.tps > a.tps ? b : a));
    lines.push(`| ceiling: pgbench 1-row UPDATE ... RETURNING, 1 commit each (best of ${r.pgbench.map((p) => p.clients).join("/")} clients: ${best.clients}) | ${fmt(ceiling)} | - | ${ratio(plugin, ceiling)} | - | - | - | - | - | 1 | 1 | ${best.load} |`);
  }
  if (r.spawn_ceiling) {
    const c = r.spawn_ceiling;
    lines.push(`| ceiling of the shell row: bench/spawn_ceiling, the shell handler on /bin/true at parallel ${c.parallel}, no database (${c.jobs.toLocaleString("en-US")} jobs) | ${fmt(c.jobs_per_s)} | ${fmt(c.seconds, 2)} | ${ratio(plugin, c.jobs_per_s)} | ${fmt(c.cpu_us_per_job * c.jobs / 1e6, 2)} | - | - | - | - | 0 | 0 | ${c.load} |`);
  }
  lines.push("");
  if (r.latency?.length) {
    lines.push("| enqueue-to-start latency | rate/s | jobs | p50 ms | p95 ms | p99 ms | max ms | from the INSERT's start: p50 / p99 ms | load (1/5/15 min) |");
    lines.push("|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for (const x of r.latency) {
      const who = x.system === "graphile" ? "Graphile Worker 0.17.3 (LISTEN/NOTIFY)" : `akadzed, ${x.listen ? "LISTEN/NOTIFY" : `polling every ${opts["poll-interval"]}`}`;
      lines.push(`| ${who} | ${x.rate} | ${x.count} | ${fmt(x.p50, 2)} | ${fmt(x.p95, 2)} | ${fmt(x.p99, 2)} | ${fmt(x.max, 2)} | ${x.from_insert ? `${fmt(x.from_insert.p50, 2)} / ${fmt(x.from_insert.p99, 2)}` : "-"} | ${x.load} |`);
    }
    lines.push("");
  }
  lines.push("Targets:");
  if (plugin && fastestPeer) {
    lines.push(`- burn-down >= 2x the faster peer: ${fmt(plugin)} vs 2 x ${fmt(fastestPeer)} = ${fmt(2 * fastestPeer)} jobs/s: ${plugin >= 2 * fastestPeer ? "met" : `MISSED (${ratio(plugin, fastestPeer)} the faster peer)`}`);
  }
  const unkept = r["akadzed_plugin-delete"]?.jobs_per_s;
  if (unkept && fastestPeer) {
    lines.push(`- the same with keep_succeeded: false (jobs deleted as they succeed, as Graphile Worker's): ${fmt(unkept)} jobs/s: ${unkept >= 2 * fastestPeer ? "met" : `MISSED (${ratio(unkept, fastestPeer)} the faster peer)`}`);
  }
  const peersServer = [r.graphile_batched, r.graphile_default, r.pgboss].filter((x) => x).map((x) => (1e6 * x.server_cpu_s) / x.jobs);
  if (peersServer.length) {
    const lowest = Math.min(...peersServer);
    for (const { key, label } of BURN_DOWNS.filter((b) => b.key.startsWith("akadzed_plugin"))) {
      const x = r[key];
      if (!x) continue;
      const us = (1e6 * x.server_cpu_s) / x.jobs;
      lines.push(`- server CPU per job at most the lower peer's, ${label}: ${fmt(us, 1)} vs ${fmt(lowest, 1)} µs: ${us <= lowest ? "met" : "MISSED"}`);
    }
  }
  // --daemons with a list: each count against the first (one daemon).
  for (const { key, label } of BURN_DOWNS.filter((b) => b.key.startsWith("akadzed_"))) {
    const first = r[key];
    for (const { x } of burnDownRows(r).filter((row) => row.key.startsWith(`${key}_x`))) {
      lines.push(`- ${x.daemons} daemons at least as fast as ${first.daemons}, ${label}: ${fmt(x.jobs_per_s)} vs ${fmt(first.jobs_per_s)} jobs/s (${ratio(x.jobs_per_s, first.jobs_per_s)}), daemon CPU ${fmt(x.cpu_s, 2)} vs ${fmt(first.cpu_s, 2)} s, server CPU ${fmt(x.server_cpu_s, 2)} vs ${fmt(first.server_cpu_s, 2)} s, cores busy ${fmt(coresBusy(x), 2)} vs ${fmt(coresBusy(first), 2)}, CPU ceiling ${fmt(cpuCeiling(x))} vs ${fmt(cpuCeiling(first))} jobs/s: ${x.jobs_per_s >= first.jobs_per_s ? "met" : "MISSED"}`);
    }
  }
  if (r.akadzed_shell && r.spawn_ceiling) {
    const shell = r.akadzed_shell;
    const c = r.spawn_ceiling.jobs_per_s;
    lines.push(`- shell burn-down within 1.5x of the spawn ceiling: ${fmt(shell.jobs_per_s)} vs ${fmt(c)} jobs/s (${ratio(c, shell.jobs_per_s)}): ${c <= 1.5 * shell.jobs_per_s ? "met" : "MISSED"}; at most 0.5 statements per job: ${fmt(shell.statements_per_job, 3)}: ${shell.statements_per_job <= 0.5 ? "met" : "MISSED"}`);
  }
  const graphile = r.latency?.find((x) => x.system === "graphile");
  for (const x of r.latency ?? []) {
    if (x.system !== "akadzed") continue;
    if (x.listen && graphile && x.rate === graphile.rate) {
      const met = x.p50 < graphile.p50 && x.p99 < graphile.p99;
      lines.push(`- latency with LISTEN at ${x.rate}/s below Graphile Worker's p50 and p99: p50 ${fmt(x.p50, 2)} vs ${fmt(graphile.p50, 2)} ms, p99 ${fmt(x.p99, 2)} vs ${fmt(graphile.p99, 2)} ms: ${met ? "met" : "MISSED"}`);
    }
    if (!x.listen) {
      const pollMs = Number(/^(\d+)ms$/.exec(opts["poll-interval"])?.[1] ?? NaN);
      lines.push(`- latency without LISTEN at ${x.rate}/s <= the poll interval (${opts["poll-interval"]}): p99 ${fmt(x.p99, 2)} ms, max ${fmt(x.max, 2)} ms: ${x.p99 <= pollMs ? "met (p99)" : "MISSED"}`);
    }
  }
  if (plugin && ceiling && r.akadzed_plugin) {
    lines.push(`- akadzed (plugin) against the ceiling: ${fmt(plugin)} jobs/s = ${(100 * plugin / ceiling).toFixed(1)}% of ${fmt(ceiling)} one-row commits/s, with ${fmt(r.akadzed_plugin.statements_per_job, 3)} statements and ${fmt(r.akadzed_plugin.commits_per_job, 3)} commits per job`);
  }
  return lines.join("\n");
}

// ---- main ----

async function main() {
  const admin = await connect("postgres");
  await admin.query(`${TAG} CREATE EXTENSION IF NOT EXISTS pg_stat_statements`);
  for (const db of [AKADZED_DB, "graphile", "pgboss", "pgbench"]) {
    const exists = await admin.query(`${TAG} SELECT 1 FROM pg_database WHERE datname = $1`, [db]);
    if (exists.rows.length === 0) await admin.query(`${TAG} CREATE DATABASE ${db}`);
  }
  if (only.has("akadzed") || only.has("latency")) {
    execFileSync(process.env.AKADZED_BIN, ["migrate", "--database-url", conninfo(AKADZED_DB)], { stdio: "inherit" });
  }
  note(`jobs=${N} daemons=${opts.daemons} slots=${opts.slots} shell-slots=${opts["shell-slots"]} prefetch=${opts.prefetch} shell-prefetch=${opts["shell-prefetch"]} finish-batch-delay=${opts["finish-batch-delay"]} shell-finish-batch-delay=${opts["shell-finish-batch-delay"]} poll_interval=${opts["poll-interval"]} load=${load()}`);
  const results = { jobs: N, options: opts, started: new Date().toISOString(), latency: [] };
  const db = await connect(AKADZED_DB);
  const save = () => fs.writeFileSync(path.join(outDir, "results.json"), JSON.stringify(results, null, 2));

  if (only.has("akadzed")) {
    for (const handler of String(opts.handlers).split(",")) {
      for (const [i, daemonCount] of daemonCounts.entries()) {
        const r = await akadzedBurnDown(admin, db, handler, daemonCount);
        // The first count under the plain key, the others beside it.
        results[i === 0 ? `akadzed_${handler}` : `akadzed_${handler}_x${daemonCount}`] = r;
        note(`akadzed ${handler}${daemonCount > 1 ? `, ${daemonCount} daemons` : ""}: ${fmt(r.jobs_per_s)} jobs/s in ${fmt(r.seconds, 2)} s, daemon CPU ${fmt(r.cpu_s, 2)} s, server CPU ${fmt(r.server_cpu_s, 2)} s, VmHWM ${fmt(r.vm_hwm_mb, 1)} MB, ${fmt(r.statements_per_job, 3)} statements/job, ${fmt(r.commits_per_job, 3)} commits/job (load ${r.load})`);
        printWarnings(r);
        note(`  claim index (jobs_claim_idx): ${fmt(r.claim_index_read_per_job, 2)} entries read per job, ${fmt(r.claim_index_fetched_per_job, 2)} of them live rows; oldest other snapshot p50 ${r.snapshot_age_p50}, max ${r.snapshot_age_max} transactions old; akadze.jobs and its indexes: ${fmt(r.jobs_blocks_hit_per_job, 1)} blocks found in shared buffers and ${fmt(r.jobs_blocks_read_per_job, 2)} read in per job`);
        printTop(`akadzed ${handler}${daemonCount > 1 ? `, ${daemonCount} daemons` : ""}`, r.top);
        if (handler === "shell" && i === 0) {
          results.spawn_ceiling = spawnCeiling(r.jobs, r.slots);
          note(`spawn ceiling (ShellHandler, no database): ${fmt(results.spawn_ceiling.jobs_per_s)} jobs/s at parallel ${r.slots}, its CPU ${fmt(results.spawn_ceiling.cpu_us_per_job)} µs/job, the children's ${fmt(results.spawn_ceiling.child_cpu_us_per_job)} µs/job`);
        }
        save();
      }
    }
  }
  if (only.has("latency")) {
    for (const rate of rates) {
      for (const listen of [true, false]) {
        const r = { system: "akadzed", ...(await withServerCounters(admin, AKADZED_DB, async () => {
          const measured = await akadzedLatency(db, { rate, listen });
          return { ...measured, jobs: measured.count };
        }, null, ["akadze.jobs"])) };
        results.latency.push(r);
        note(`akadzed latency ${rate}/s ${listen ? "listen" : "poll"}: p50 ${fmt(r.p50, 2)} p95 ${fmt(r.p95, 2)} p99 ${fmt(r.p99, 2)} max ${fmt(r.max, 2)} ms, ${r.count} jobs, daemon CPU ${fmt(r.cpu_s, 2)} s, ${fmt(r.statements_per_job, 2)} statements/job (load ${r.load})`);
        printWarnings(r);
        printTop(`akadzed latency ${rate}/s ${listen ? "listen" : "poll"}`, r.top);
        save();
      }
    }
  }
  if (only.has("graphile")) {
    for (const mode of String(opts["graphile-modes"]).split(",").filter(Boolean)) {
      if (mode !== "batched" && mode !== "default") throw new Error(`--graphile-modes: unknown mode '${mode}' (batched, default)`);
      const r = await graphileBurnDown(admin, mode, 2);
      results[`graphile_${mode}`] = r;
      note(`Graphile Worker ${mode}: ${fmt(r.jobs_per_s)} jobs/s in ${fmt(r.seconds, 2)} s, CPU ${fmt(r.cpu_s, 2)} s, server CPU ${fmt(r.server_cpu_s, 2)} s, ${fmt(r.statements_per_job, 3)} statements/job, ${fmt(r.commits_per_job, 3)} commits/job (load ${r.load})`);
      printWarnings(r);
      save();
    }
  }
  if (only.has("graphile-latency")) {
    const r = { system: "graphile", ...(await graphileLatency(rates[0])) };
    results.latency.push(r);
    note(`Graphile Worker latency ${r.rate}/s: p50 ${fmt(r.p50, 2)} p95 ${fmt(r.p95, 2)} p99 ${fmt(r.p99, 2)} max ${fmt(r.max, 2)} ms (load ${r.load})`);
    save();
  }
  if (only.has("pgboss")) {
    const r = await pgbossBurnDown(admin);
    results.pgboss = r;
    note(`pg-boss: ${fmt(r.jobs_per_s)} jobs/s in ${fmt(r.seconds, 2)} s, CPU ${fmt(r.cpu_s, 2)} s, server CPU ${fmt(r.server_cpu_s, 2)} s, ${fmt(r.statements_per_job, 3)} statements/job, ${fmt(r.commits_per_job, 3)} commits/job (load ${r.load})`);
    printWarnings(r);
    save();
  }
  if (only.has("pgbench")) {
    results.pgbench = await pgbenchCeiling(admin);
    save();
  }
  await db.end();
  await admin.end();

  const table = report(results);
  console.log(`\n${table}`);
  fs.writeFileSync(path.join(outDir, "results.md"), `${table}\n`);
  fs.writeFileSync(path.join(outDir, "details.txt"), `${details.join("\n")}\n`);
  const bars = BURN_DOWNS.filter(({ key }) => results[key]).map(({ key, bar }) => [bar, results[key]]);
  fs.writeFileSync(path.join(outDir, "plot-note.txt"),
    `${N.toLocaleString("en-US")} jobs, ${results.started.slice(0, 16).replace("T", " ")} UTC, load ${results.akadzed_plugin?.load ?? load()}`);
  fs.writeFileSync(path.join(outDir, "throughput.dat"),
    bars.map(([label, x]) => `"${label}" ${x.jobs_per_s.toFixed(0)}`).join("\n") + "\n");
}

main().catch((e) => {
  console.error(e.stack ?? String(e));
  process.exit(1);
});
