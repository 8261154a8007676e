// CPU seconds of processes from /proc, for the benchmark drivers
// (bench/throughput, bench/endurance): one place that reads /proc/<pid>/stat.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const clkTck = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim());

// User + system CPU seconds of `pid` (with its waited-for children's when
// `withChildren`); NaN when the process is gone.
export function cpuSeconds(pid, withChildren = false) {
  try {
    const fields = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    // fields[0] is field 3 (state): utime is field 14, stime 15, cutime 16, cstime 17.
    let ticks = Number(fields[11]) + Number(fields[12]);
    if (withChildren) ticks += Number(fields[13]) + Number(fields[14]);
    return ticks / clkTck;
  } catch {
    return NaN;
  }
}

// The server's CPU: the postmaster with its exited children, plus the live ones.
export function serverCpuSeconds() {
  const postmaster = Number(fs.readFileSync(path.join(process.env.AKADZED_PG_DATA, "postmaster.pid"), "utf8").split("\n")[0]);
  let total = cpuSeconds(postmaster, true);
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const fields = fs.readFileSync(`/proc/${entry}/stat`, "utf8").split(") ")[1].split(" ");
      if (Number(fields[1]) === postmaster) total += (Number(fields[11]) + Number(fields[12])) / clkTck;
    } catch {
      // the process ended meanwhile
    }
  }
  return total;
}

// The p-th percentile (nearest rank) of ascending `sorted`; NaN when empty.
export function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank];
}
