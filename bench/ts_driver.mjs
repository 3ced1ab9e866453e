// The TypeScript coordinator's side of the throughput bench (bench/typescript.py).
//
//   node --expose-gc bench/ts_driver.mjs DIST WORKLOAD.json WARM
//
// DIST is the built package's dist/ (python -m bench.ts_setup); WORKLOAD.json
// is the workload bench/workload.py plans, exported by bench/typescript.py.
// Runs WARM untimed passes that check every answer (result, expected state,
// filtered reads), prints "ready", then answers each "pass" line on stdin
// with one timed pass as a JSON line: the whole pass runs in this process, so
// no call crosses a process boundary. Any error answer ends the run: it is
// printed to stderr and the process exits 1.

import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { readFileSync } from "node:fs";

const [dist, workloadPath, warmText] = process.argv.slice(2);
const { Coordinator } = await import(pathToFileURL(join(dist, "index.js")).href);
const workload = JSON.parse(readFileSync(workloadPath, "utf-8"));
const { CREATE, TASK, READ } = workload.ops;

function fail(message) {
  process.stderr.write(`ts_driver: ${message}\n`);
  process.exit(1);
}

// Configured as bench/impls.py configures the Python reference.
function fresh() {
  const coord = new Coordinator({
    deterministicIds: true,
    deterministicClock: true,
    enableChain: true,
    defaultProfiles: workload.profiles,
  });
  for (const env of structuredClone(workload.setup)) {
    const r = coord.dispatch(env);
    if (!("result" in r)) fail(`setup ${env.method}: ${JSON.stringify(r)}`);
  }
  return coord;
}

// As bench/workload.py's drive_checked: a result, the expected state, and
// reads that return the cycle's task's entries only.
function checked(coord, calls) {
  let tid = null;
  for (const [env, op, state] of calls) {
    if (op === TASK) env.params.task_id = tid;
    else if (op === READ) env.params.filter.task_id = tid;
    const r = coord.dispatch(env);
    if (!("result" in r)) fail(`${env.method} ${env.id}: ${JSON.stringify(r)}`);
    if (op === CREATE) tid = r.result.task_id;
    if (state !== null && r.result.state !== state) {
      fail(`${env.method} ${env.id}: expected state ${state}, got ${JSON.stringify(r.result)}`);
    }
    if (op === READ) {
      const entries = r.result.entries;
      if (!entries?.length || entries.some((e) => e.envelope.params.task_id !== tid)) {
        fail(`audit.read ${env.id}: entries do not match task ${tid}`);
      }
    }
  }
}

// As bench/workload.py's drive: bind the task id, dispatch, keep the first
// error answer to report after the clock stops.
function timed(coord, calls) {
  let tid = null;
  let bad = null;
  for (const [env, op] of calls) {
    if (op === TASK) env.params.task_id = tid;
    else if (op === READ) env.params.filter.task_id = tid;
    const r = coord.dispatch(env);
    if ("error" in r) bad ??= [env, r];
    else if (op === CREATE) tid = r.result.task_id;
  }
  return bad;
}

for (let i = 0; i < Number(warmText); i++) checked(fresh(), structuredClone(workload.calls));
process.stdout.write("ready\n");

for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() !== "pass") fail(`unknown command ${JSON.stringify(line)}`);
  const coord = fresh();
  const calls = structuredClone(workload.calls);
  globalThis.gc();  // as the Python side's gc.collect() before its clock starts
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  const bad = timed(coord, calls);
  const wall = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  if (bad !== null) fail(`${bad[0].method} ${bad[0].id}: ${JSON.stringify(bad[1])}`);
  process.stdout.write(JSON.stringify({ calls: calls.length, wall_s: wall, cpu_s: (cpu.user + cpu.system) / 1e6 }) + "\n");
}
