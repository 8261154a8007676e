// The endurance benchmark's driver (issue 41, goal 5; started by
// bench/endurance/run, which builds akadzed and the no-op plugin, installs
// the peers and starts a throwaway PostgreSQL with autovacuum at its
// defaults). For each system in turn (akadzed, Graphile Worker, pg-boss),
// each in a database of its own, it runs the same scenario:
//
//  - a producer enqueuing --rate jobs a second (default 1,000) as 20 calls
//    a second of rate/20 jobs each, on a fixed schedule: akadzed's
//    akadze.enqueue_many, Graphile Worker's addJobs, pg-boss's insert (one
//    statement each); every job carries the producer's wall clock;
//  - the system's worker running no-op jobs: akadzed (`akadzed run`, one
//    queue, --slots 50, --prefetch 0, --mode fair, listen_notify on, the
//    no-op plugin recording each start), Graphile Worker (bench/peers,
//    --graphile-mode batched, --graphile-concurrency 24: its local queue
//    of 500 is its prefetch) and pg-boss (--pgboss-workers 4 x work() with
//    --pgboss-batch 500, polling every --pgboss-poll 0.5 s: it has no LISTEN);
//  - from --hold-start (30 s) for --hold seconds (60), another session of
//    the same database holds a REPEATABLE READ snapshot (BEGIN; one SELECT
//    of the job table; left open), so no dead row version can be removed;
//  - after --duration (default hold-start + hold + 30 s) the producer
//    stops and the backlog drains.
//
// Every --window seconds (10) it prints one line per system: jobs started,
// enqueue-to-start p50/p99 of the jobs started in the window (the
// producer's clock before the call against the handler's when it began),
// the ready backlog (max of the once-a-second samples), dead row versions
// (pg_stat_user_tables.n_dead_tup of the system's tables), for akadzed the
// entries of the claim index (pgstattuple: its queued jobs plus the entries
// of dead versions the claims walk), the claim time (akadzed: its
// akadzed_claim_duration_seconds histogram; the peers: the mean of their
// statements with SKIP LOCKED in pg_stat_statements), CPU per job started
// in the window, the worker's (client) and the server's, the job table's
// and its indexes' sizes, and the worker's RSS.
//
// --long: a long run (default 1,800 s at 1,000 jobs/s, 1.8 million jobs,
// akadzed only, no hold unless --hold is given, 60 s windows) with
// keep_succeeded: true and pruning on (--retention 10m), autovacuum at its
// defaults: the table and index sizes, claim time and RSS must level off.
//
// It writes results.md, results.json, windows-<system>.dat (for
// endurance.gp) to $AKADZED_BENCH_OUT.
//
// Environment (set by the run script): PGHOST, PGPORT, PGUSER, AKADZED_BIN,
// AKADZED_NOOP_PLUGIN, AKADZED_PEERS_DIR, AKADZED_BENCH_OUT, AKADZED_PG_DATA.
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";

import { cpuSeconds, percentile, serverCpuSeconds } from "../lib/process_cpu.mjs";

const require = createRequire(`${process.env.AKADZED_PEERS_DIR}/package.json`);
const pg = require("pg");
// int8 as numbers (job ids, counts): all well below 2^53 here.
pg.types.setTypeParser(20, Number);

// ---- options ----

const defaults = {
  hold: 60,
  "hold-start": 30,
  duration: 0,
  rate: 1000,
  only: "akadzed,graphile,pgboss",
  keys: 0,
  slots: 50,
  prefetch: 0,
  mode: "fair",
  window: 10,
  "graphile-mode": "batched",
  "graphile-concurrency": 24,
  "pgboss-workers": 4,
  "pgboss-batch": 500,
  "pgboss-poll": 0.5,
  retention: "10m",
  long: false,
};
const opts = { ...defaults };
const given = new Set();
for (let i = 2; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, "");
  if (key === "long") {
    opts.long = true;
    i -= 1;
    continue;
  }
  if (!(key in defaults) || i + 1 >= process.argv.length) {
    console.error(`unknown option or missing value: ${process.argv[i]}`);
    process.exit(2);
  }
  opts[key] = process.argv[i + 1];
  given.add(key);
}
if (opts.long) {
  if (!given.has("duration")) opts.duration = 1800;
  if (!given.has("hold")) opts.hold = 0;
  if (!given.has("window")) opts.window = 60;
  if (!given.has("only")) opts.only = "akadzed";
}
const rate = Number(opts.rate);
const holdS = Number(opts.hold);
const holdStartS = Number(opts["hold-start"]);
const windowS = Number(opts.window);
const durationS = Number(opts.duration) > 0 ? Number(opts.duration) : holdStartS + holdS + 30;
const keys = Number(opts.keys);
const only = String(opts.only).split(",").filter(Boolean);
for (const s of only) {
  if (!["akadzed", "graphile", "pgboss"].includes(s)) throw new Error(`--only: unknown system '${s}' (akadzed, graphile, pgboss)`);
}
if (rate < 20 || rate % 20 !== 0) throw new Error("--rate: a multiple of 20 (20 calls a second)");
const outDir = process.env.AKADZED_BENCH_OUT;
fs.mkdirSync(outDir, { recursive: true });
const peerWorker = path.join(path.dirname(fileURLToPath(import.meta.url)), "../peers/peer_worker.mjs");
const TAG = "/* akadzed-bench */";

// ---- small helpers (as bench/throughput/throughput.mjs's) ----

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const wallMs = () => performance.timeOrigin + performance.now();
const load = () => fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
const connection = (database) => ({ host: process.env.PGHOST, port: Number(process.env.PGPORT), user: process.env.PGUSER, database });
const conninfo = (database) => `host=${process.env.PGHOST} port=${process.env.PGPORT} user=${process.env.PGUSER} dbname=${database}`;

async function connect(database) {
  const client = new pg.Client(connection(database));
  client.on("error", (e) => console.error(`connection error (${database}): ${e.message}`));
  await client.connect();
  return client;
}

function rssMb(pid) {
  try {
    const line = fs.readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"));
    return Number(line.split(/\s+/)[1]) / 1024;
  } catch {
    return NaN;
  }
}

const fmt = (v, digits = 0) => (v === undefined || v === null || Number.isNaN(v) ? "-" : Number(v).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits }));

async function waitFor(condition, everyMs, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(everyMs);
  }
}

const liveChildren = new Set();
process.on("exit", () => liveChildren.forEach((child) => child.kill("SIGKILL")));
// Interrupted: the children go too (through the exit handler).
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => process.exit(128 + os.constants.signals[signal]));

function startChild(argv, env, name, readyText) {
  const child = spawn(argv[0], argv.slice(1), { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  liveChildren.add(child);
  child.on("exit", () => liveChildren.delete(child));
  let output = "";
  let resolveReady;
  const ready = new Promise((resolve) => (resolveReady = resolve));
  const onData = (data) => {
    output = (output + data.toString()).slice(-200000);
    if (readyText && output.includes(readyText)) resolveReady();
  };
  child.stdout.on("data", onData);
  child.stderr.on("data", onData);
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve(code ?? 128 + os.constants.signals[signal])));
  if (!readyText) resolveReady();
  return { child, ready, exited, output: () => output, name };
}

async function stopChild(proc, timeoutMs = 30000) {
  if (proc.child.exitCode !== null) return proc.child.exitCode;
  proc.child.kill("SIGTERM");
  const code = await Promise.race([proc.exited, sleep(timeoutMs).then(() => "timeout")]);
  if (code === "timeout") {
    proc.child.kill("SIGKILL");
    throw new Error(`${proc.name} did not stop within ${timeoutMs} ms:\n${proc.output().slice(-2000)}`);
  }
  return code;
}

// The TCP ports `pid` listens on: its sockets' inodes against /proc/net/tcp
// (the daemon's metrics listener is on 127.0.0.1:0, and its log at warn
// does not say which port it got).
function listeningPorts(pid) {
  const inodes = new Set();
  for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(fs.readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) inodes.add(m[1]);
    } catch {
      // closed meanwhile
    }
  }
  const ports = [];
  for (const line of fs.readFileSync(`/proc/${pid}/net/tcp`, "utf8").trim().split("\n").slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f[3] === "0A" && inodes.has(f[9])) ports.push(parseInt(f[1].split(":")[1], 16));
  }
  return ports;
}

function httpGet(port, urlPath) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: "127.0.0.1", port, path: urlPath, timeout: 10000 }, (res) => {
      let body = "";
      res.on("data", (d) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode, body }));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
  });
}

// akadzed's claim histogram for queue "bench": {count, sum_s}.
async function scrapeClaims(port) {
  const { status, body } = await httpGet(port, "/metrics");
  if (status !== 200) throw new Error(`GET /metrics: ${status}`);
  const value = (name) => {
    const m = new RegExp(`^${name}\\{queue="bench"\\} (\\S+)$`, "m").exec(body);
    return m ? Number(m[1]) : 0;
  };
  return { count: value("akadzed_claim_duration_seconds_count"), sum_s: value("akadzed_claim_duration_seconds_sum") };
}

// Lines appended to `file` since the last call (whole lines only).
function tailer(file) {
  let offset = 0;
  let rest = "";
  return () => {
    if (!fs.existsSync(file)) return [];
    const size = fs.statSync(file).size;
    if (size <= offset) return [];
    const fd = fs.openSync(file, "r");
    const buf = Buffer.alloc(size - offset);
    fs.readSync(fd, buf, 0, buf.length, offset);
    fs.closeSync(fd);
    offset = size;
    const text = rest + buf.toString();
    const lines = text.split("\n");
    rest = lines.pop();
    return lines;
  };
}

// ---- the systems ----
// Each: prepare(db) -> start() -> {procs, pids(), latencies() (new [latency ms]
// since the last call), claimMs() (mean since the last call)}; enqueue(batch);
// backlog SQL; the tables it writes.

const akadzed = {
  name: "akadzed",
  database: "akadzed",
  schema: "akadze",
  table: "akadze.jobs",
  label: () => `akadzed, ${opts.mode}, slots ${opts.slots}, prefetch ${opts.prefetch}, LISTEN${keys ? `, ${keys} limit keys` : ""}${opts.long ? `, keep_succeeded, pruning after ${opts.retention}` : ""}`,
  backlogSql: `SELECT count(*)::int8 AS n FROM akadze.jobs WHERE queue = 'bench' AND state = 'queued' AND run_at <= now()`,
  async prepare(db) {
    execFileSync(process.env.AKADZED_BIN, ["migrate", "--database-url", conninfo(this.database)], { stdio: "ignore" });
    if (keys > 0) {
      await db.query(`${TAG} INSERT INTO akadze.limits (key, max_running, max_starts, starts_window)
                       SELECT 'k' || i, 4, 10, interval '1 second' FROM generate_series(0, $1::int - 1) AS i`, [keys]);
    }
  },
  async start(db) {
    const record = path.join(outDir, "akadzed-starts.txt");
    fs.rmSync(record, { force: true });
    const config = [
      `database: {url: "${conninfo(this.database)}"}`,
      "worker:",
      "  listen_notify: true",
      "queues:",
      `  - {name: bench, slots: ${opts.slots}, prefetch: ${opts.prefetch}, mode: ${opts.mode}}`,
      "handlers:",
      `  noop: {plugin: {path: "${process.env.AKADZED_NOOP_PLUGIN}", config: {record: "${record}"}}}`,
      opts.long ? `pruning: {enabled: true, retention: ${opts.retention}}` : "pruning: {enabled: false}",
      "logging: {level: warn}",
      'metrics: {listen: "127.0.0.1:0"}',
      "",
    ].join("\n");
    const file = path.join(outDir, "akadzed.yaml");
    fs.writeFileSync(file, config);
    const daemon = startChild([process.env.AKADZED_BIN, "run", "--config", file], {}, "akadzed", null);
    await waitFor(async () => {
      if (daemon.child.exitCode !== null) throw new Error(`akadzed exited:\n${daemon.output().slice(-2000)}`);
      const r = await db.query(`${TAG} SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database()
                                 AND application_name = 'akadzed listen' AND state = 'idle' AND query <> ''`);
      return r.rows[0].n === 1 && listeningPorts(daemon.child.pid).length === 1;
    }, 20, 60000, "akadzed to listen");
    const port = listeningPorts(daemon.child.pid)[0];
    const enqueuedAt = this.enqueuedAt = new Map();
    const tail = tailer(record);
    let last = await scrapeClaims(port);
    return {
      procs: [daemon],
      latencies() {
        const out = [];
        for (const line of tail()) {
          const [id, us] = line.split(" ");
          const t = enqueuedAt.get(Number(id));
          if (t === undefined) continue;
          enqueuedAt.delete(Number(id));
          out.push(Number(us) / 1000 - t);
        }
        return out;
      },
      async claimMs() {
        const now = await scrapeClaims(port);
        const ms = now.count > last.count ? (1000 * (now.sum_s - last.sum_s)) / (now.count - last.count) : NaN;
        last = now;
        return ms;
      },
    };
  },
  async producer() {
    // A connection of its own: the driver's reads must not delay the calls.
    const db = await connect(this.database);
    this.close = () => db.end();
    let n = 0;
    return async (batch) => {
      const jobs = [];
      for (let i = 0; i < batch; ++i) {
        jobs.push(keys > 0 ? { task: "noop", queue: "bench", limit_key: `k${n++ % keys}` } : { task: "noop", queue: "bench" });
      }
      const t = wallMs();
      const r = await db.query("SELECT akadze.enqueue_many($1::jsonb) AS ids", [JSON.stringify(jobs)]);
      for (const id of r.rows[0].ids) this.enqueuedAt.set(Number(id), t);
    };
  },
};

// The peers' claim time: their statements with SKIP LOCKED, from pg_stat_statements.
async function skipLockedMs(admin, database, last) {
  const r = await admin.query(`${TAG} SELECT coalesce(sum(calls), 0)::int8 AS calls, coalesce(sum(total_exec_time), 0)::float8 AS ms
      FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
      WHERE d.datname = $1 AND s.query ILIKE '%skip locked%' AND s.query NOT LIKE '%akadzed-bench%'`, [database]);
  const now = { calls: Number(r.rows[0].calls), ms: Number(r.rows[0].ms) };
  const ms = now.calls > last.calls ? (now.ms - last.ms) / (now.calls - last.calls) : NaN;
  Object.assign(last, now);
  return ms;
}

function peerRun(name, args, database, admin) {
  return async () => {
    const record = path.join(outDir, `${name}-starts.txt`);
    fs.rmSync(record, { force: true });
    const worker = startChild(["node", peerWorker, ...args], { PGDATABASE: database, AKADZED_PEER_RECORD: record }, name, "ready");
    await Promise.race([worker.ready, worker.exited.then((code) => { throw new Error(`${name} exited (${code}):\n${worker.output()}`); })]);
    const tail = tailer(record);
    const last = { calls: 0, ms: 0 };
    await skipLockedMs(admin, database, last);
    return {
      procs: [worker],
      latencies: () => tail().map((line) => Number(line.split(" ")[1])),
      claimMs: () => skipLockedMs(admin, database, last),
    };
  };
}

// A pool of 2 with the error handlers Graphile Worker asks for.
function poolWithHandlers(database) {
  const pool = new pg.Pool({ ...connection(database), max: 2 });
  pool.on("error", (e) => console.error(`pool error: ${e.message}`));
  pool.on("connect", (client) => client.on("error", (e) => console.error(`connection error: ${e.message}`)));
  return pool;
}

function graphile(admin) {
  return {
    name: "graphile",
    database: "graphile",
    schema: "graphile_worker",
    table: "graphile_worker._private_jobs",
    label: () => `Graphile Worker 0.17.3, ${opts["graphile-mode"]}, concurrency ${opts["graphile-concurrency"]}`,
    backlogSql: `SELECT count(*)::int8 AS n FROM graphile_worker._private_jobs WHERE locked_at IS NULL AND run_at <= now()`,
    async prepare(db) {
      const { runMigrations } = require("graphile-worker");
      const pool = poolWithHandlers(this.database);
      await runMigrations({ pgPool: pool });
      await pool.end();
    },
    start: peerRun("graphile", ["graphile", String(opts["graphile-mode"]), String(opts["graphile-concurrency"])], "graphile", admin),
    async producer() {
      const { makeWorkerUtils } = require("graphile-worker");
      const pool = poolWithHandlers(this.database);
      const utils = await makeWorkerUtils({ pgPool: pool });
      this.close = async () => {
        await utils.release();
        await pool.end();
      };
      return async (batch) => {
        const t = wallMs();
        await utils.addJobs(Array.from({ length: batch }, () => ({ identifier: "noop", payload: { enqueued_ms: t } })));
      };
    },
  };
}

function pgboss(admin) {
  return {
    name: "pgboss",
    database: "pgboss",
    schema: "pgboss",
    table: "pgboss.job",
    label: () => `pg-boss 10.4.2, ${opts["pgboss-workers"]} x work() of ${opts["pgboss-batch"]}, polling ${opts["pgboss-poll"]} s`,
    backlogSql: `SELECT count(*)::int8 AS n FROM pgboss.job WHERE name = 'noop' AND state < 'active' AND start_after <= now()`,
    async prepare() {
      const PgBoss = require("pg-boss");
      const boss = new PgBoss({ ...connection(this.database), schedule: false, supervise: false });
      boss.on("error", (e) => console.error(`pg-boss error: ${e.message}`));
      await boss.start();
      await boss.createQueue("noop");
      await boss.stop({ graceful: false, wait: true });
    },
    start: peerRun("pgboss", ["pgboss", String(opts["pgboss-workers"]), String(opts["pgboss-batch"]), String(opts["pgboss-poll"])], "pgboss", admin),
    async producer() {
      const PgBoss = require("pg-boss");
      const boss = new PgBoss({ ...connection(this.database), schedule: false, supervise: false, migrate: false, max: 2 });
      boss.on("error", (e) => console.error(`pg-boss error: ${e.message}`));
      await boss.start();
      this.close = () => boss.stop({ graceful: false, wait: true });
      return async (batch) => {
        const t = wallMs();
        await boss.insert(Array.from({ length: batch }, () => ({ name: "noop", data: { enqueued_ms: t } })));
      };
    },
  };
}

// ---- one system's run ----

async function sizesMb(db, table) {
  const r = await db.query(`${TAG} SELECT (pg_relation_size(c.oid) + coalesce(sum(pg_relation_size(p.inhrelid)), 0))::float8 / 1048576 AS table_mb,
                                   (pg_indexes_size(c.oid) + coalesce(sum(pg_indexes_size(p.inhrelid)), 0))::float8 / 1048576 AS index_mb
                            FROM pg_class c LEFT JOIN pg_inherits p ON p.inhparent = c.oid
                            WHERE c.oid = $1::regclass GROUP BY c.oid`, [table]);
  return r.rows[0];
}

async function deadVersions(db, schema) {
  const r = await db.query(`${TAG} SELECT coalesce(sum(n_dead_tup), 0)::int8 AS n FROM pg_stat_user_tables WHERE schemaname = $1`, [schema]);
  return Number(r.rows[0].n);
}

async function runSystem(admin, sys, pgstattuple) {
  const db = await connect(sys.database);
  await sys.prepare(db);
  await admin.query(`${TAG} CHECKPOINT`);
  await admin.query(`${TAG} SELECT pg_stat_statements_reset()`);
  const run = await sys.start(db);
  const enqueue = await sys.producer();
  const ticks = 20;
  const batch = rate / ticks;
  console.log(`\n${sys.label()}: ${rate} jobs/s for ${durationS} s, ${holdS > 0 ? `snapshot held from ${holdStartS} s to ${holdStartS + holdS} s` : "no snapshot held"}, ${windowS} s windows (load ${load()})`);
  const header = "|   t s | phase | started | p50 ms | p99 ms | backlog max | dead versions | claim idx entries | claim ms | client µs/job | server µs/job | table MB | index MB | RSS MB |";
  console.log(header);
  console.log("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");

  const samplerDb = await connect(sys.database);
  const holder = await connect(sys.database);
  const t0 = wallMs();
  const elapsed = () => (wallMs() - t0) / 1000;
  let held = false;
  let released = false;
  let stopping = false;
  let producerError = null;
  let late = 0;
  // The producer: `ticks` calls a second on a fixed schedule, not waiting for
  // earlier calls (the client queues them): the rate holds on average.
  const inflight = new Set();
  const producing = (async () => {
    for (let k = 0; !stopping; ++k) {
      const wait = t0 + (k * 1000) / ticks - wallMs();
      if (wait >= 1) await sleep(wait);
      else if (wait < -1000) late += 1;
      if (stopping || elapsed() >= durationS) break;
      const p = enqueue(batch).catch((e) => { producerError = producerError ?? e; });
      inflight.add(p);
      p.finally(() => inflight.delete(p));
    }
  })();
  let backlogMax = 0;
  let backlogLast = 0;
  let samplerError = null;
  const samplerTimer = setInterval(async () => {
    try {
      const n = Number((await samplerDb.query(`${TAG} ${sys.backlogSql}`)).rows[0].n);
      backlogMax = Math.max(backlogMax, n);
      backlogLast = n;
    } catch (e) {
      samplerError = samplerError ?? e;
    }
  }, 1000);

  const pids = () => run.procs.map((p) => p.child.pid);
  let cpuClient = pids().reduce((s, pid) => s + cpuSeconds(pid), 0);
  let cpuServer = serverCpuSeconds();
  const windows = [];
  let nextWindow = windowS;
  const holdEnd = holdStartS + holdS;
  for (;;) {
    const now = elapsed();
    for (const p of run.procs) {
      if (p.child.exitCode !== null) throw new Error(`${p.name} exited:\n${p.output().slice(-2000)}`);
    }
    if (producerError) throw producerError;
    if (samplerError) throw samplerError;
    if (now >= nextWindow) {
      const latencies = run.latencies().sort((a, b) => a - b);
      const c = pids().reduce((s, pid) => s + cpuSeconds(pid), 0);
      const sv = serverCpuSeconds();
      const started = latencies.length;
      const size = await sizesMb(db, sys.table);
      let idxEntries = NaN;
      if (pgstattuple && sys.name === "akadzed") {
        idxEntries = Number((await db.query(`${TAG} SELECT tuple_count::int8 AS n FROM pgstattuple('akadze.jobs_claim_idx')`)).rows[0].n);
      }
      const w = {
        t: Math.round(now),
        // By the window's end (0.5 s of slack for the loop's lateness).
        phase: held ? "held" : now > durationS + 0.5 ? "drain" : released ? "after" : holdS > 0 ? "fresh" : "run",
        started,
        p50: percentile(latencies, 50),
        p99: percentile(latencies, 99),
        backlog_max: backlogMax,
        dead: await deadVersions(db, sys.schema),
        claim_idx_entries: idxEntries,
        claim_ms: await run.claimMs(),
        // Per job only where jobs ran at the rate: in a window of the drain
        // the CPU is mostly idle loops, divided by a handful of jobs.
        client_us: started >= (rate * windowS) / 2 ? (1e6 * (c - cpuClient)) / started : NaN,
        server_us: started >= (rate * windowS) / 2 ? (1e6 * (sv - cpuServer)) / started : NaN,
        table_mb: Number(size.table_mb),
        index_mb: Number(size.index_mb),
        rss_mb: run.procs.reduce((s, p) => s + rssMb(p.child.pid), 0),
      };
      cpuClient = c;
      cpuServer = sv;
      backlogMax = backlogLast;
      windows.push(w);
      console.log(`| ${String(w.t).padStart(5)} | ${w.phase} | ${fmt(w.started)} | ${fmt(w.p50, 1)} | ${fmt(w.p99, 1)} | ${fmt(w.backlog_max)} | ${fmt(w.dead)} | ${fmt(w.claim_idx_entries)} | ${fmt(w.claim_ms, 2)} | ${fmt(w.client_us)} | ${fmt(w.server_us)} | ${fmt(w.table_mb, 1)} | ${fmt(w.index_mb, 1)} | ${fmt(w.rss_mb, 1)} |`);
      nextWindow += windowS;
      if (now >= durationS) {
        stopping = true;
        // Drained: the backlog is empty and nothing started in the last window.
        if (backlogLast === 0 && (started === 0 || now >= durationS + 120)) break;
      }
    }
    // After the window's line: a window ending at the hold's start is fresh.
    if (holdS > 0 && !held && now >= holdStartS && now < holdEnd) {
      await holder.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
      await holder.query(`SELECT 1 FROM ${sys.table} LIMIT 1`);
      held = true;
    }
    if (held && now >= holdEnd) {
      await holder.query("ROLLBACK");
      held = false;
      released = true;
    }
    await sleep(Math.max(1, Math.min(200, (t0 + nextWindow * 1000) - wallMs())));
  }
  await producing;
  await Promise.all([...inflight]);
  clearInterval(samplerTimer);
  if (held) await holder.query("ROLLBACK");
  for (const p of run.procs) await stopChild(p);
  await sys.close?.();
  await holder.end();
  await samplerDb.end();
  await db.end();
  if (late > 0) console.log(`  warning: the producer fell more than 1 s behind its schedule ${late} times`);
  const top = await admin.query(`${TAG} SELECT calls, round(mean_exec_time::numeric, 3) AS mean_ms, round(total_exec_time::numeric, 0) AS total_ms,
        left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS query
      FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
      WHERE d.datname = $1 AND s.query NOT LIKE '%akadzed-bench%' ORDER BY total_exec_time DESC LIMIT 6`, [sys.database]);
  console.log(`  top statements (pg_stat_statements, whole run):`);
  for (const row of top.rows) console.log(`    calls=${row.calls} mean_ms=${row.mean_ms} total_ms=${row.total_ms} | ${row.query}`);
  return { system: sys.name, label: sys.label(), windows };
}

// The summary: the last window before the hold ("fresh") against the last
// window of the hold, per system.
function summary(results) {
  const lines = [];
  lines.push(`Endurance: ${rate} jobs/s, ${holdS > 0 ? `a snapshot held ${holdS} s from ${holdStartS} s` : "no snapshot held"} (${new Date().toISOString().slice(0, 16)} UTC, ${os.cpus().length} cores, load ${load()})`);
  lines.push("");
  lines.push("| system | fresh p50 / p99 ms | end of hold p50 / p99 ms | backlog max fresh / held | dead versions at the end of the hold | claim ms fresh / end of hold | client µs/job fresh / held | server µs/job fresh / held |");
  lines.push("|---|---:|---:|---:|---:|---:|---:|---:|");
  for (const r of results) {
    const fresh = r.windows.filter((w) => w.phase === "fresh");
    const heldW = r.windows.filter((w) => w.phase === "held");
    const f = fresh[fresh.length - 1];
    const h = heldW[heldW.length - 1];
    if (!f) continue;
    const maxOf = (ws) => (ws.length ? Math.max(...ws.map((w) => w.backlog_max)) : NaN);
    lines.push(`| ${r.label} | ${fmt(f.p50, 1)} / ${fmt(f.p99, 1)} | ${h ? `${fmt(h.p50, 1)} / ${fmt(h.p99, 1)}` : "-"} | ${fmt(maxOf(fresh))} / ${fmt(maxOf(heldW))} | ${h ? fmt(h.dead) : "-"} | ${fmt(f.claim_ms, 2)} / ${h ? fmt(h.claim_ms, 2) : "-"} | ${fmt(f.client_us)} / ${h ? fmt(h.client_us) : "-"} | ${fmt(f.server_us)} / ${h ? fmt(h.server_us) : "-"} |`);
  }
  return lines.join("\n");
}

async function main() {
  const admin = await connect("postgres");
  await admin.query(`${TAG} CREATE EXTENSION IF NOT EXISTS pg_stat_statements`);
  const systems = { akadzed, graphile: graphile(admin), pgboss: pgboss(admin) };
  let pgstattuple = true;
  for (const name of only) {
    // A new database for each system, as a new user's: no statistics from an
    // ANALYZE of an empty table (a plan for an empty table, kept until
    // autovacuum's first ANALYZE, made akadzed's first minute slow).
    const db = systems[name].database;
    await admin.query(`${TAG} DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
    await admin.query(`${TAG} CREATE DATABASE ${db}`);
    const c = await connect(db);
    try {
      await c.query(`${TAG} CREATE EXTENSION IF NOT EXISTS pgstattuple`);
    } catch {
      pgstattuple = false;
    }
    await c.end();
  }
  if (!pgstattuple) console.log("pgstattuple is not installed: no claim index entries");
  console.log(`options: ${JSON.stringify(opts)}; load ${load()}`);
  const results = [];
  for (const name of only) {
    results.push(await runSystem(admin, systems[name], pgstattuple));
    fs.writeFileSync(path.join(outDir, "results.json"), JSON.stringify({ options: opts, results }, null, 2));
  }
  await admin.end();
  for (const r of results) {
    fs.writeFileSync(path.join(outDir, `windows-${r.system}.dat`),
      "# t p50_ms p99_ms backlog_max dead claim_ms client_us server_us table_mb index_mb rss_mb claim_idx_entries\n" +
      r.windows.map((w) => [w.t, w.p50, w.p99, w.backlog_max, w.dead, w.claim_ms, w.client_us, w.server_us, w.table_mb, w.index_mb, w.rss_mb, w.claim_idx_entries]
        .map((v) => (v === null || Number.isNaN(v) ? "NaN" : Number(v).toFixed(3))).join(" ")).join("\n") + "\n");
  }
  const table = summary(results);
  console.log(`\n${table}`);
  fs.writeFileSync(path.join(outDir, "results.md"), `${table}\n`);
  fs.writeFileSync(path.join(outDir, "plot-note.txt"),
    `${rate} jobs/s, hold ${holdS} s from ${holdStartS} s, ${new Date().toISOString().slice(0, 16).replace("T", " ")} UTC, load ${load()}`);
  fs.writeFileSync(path.join(outDir, "hold.txt"), `${holdS > 0 ? holdStartS : 0} ${holdS > 0 ? holdStartS + holdS : 0}\n`);
}

main().catch((e) => {
  console.error(e.stack ?? String(e));
  process.exit(1);
});
