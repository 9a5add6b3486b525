// graphile-worker draining no-op jobs on the PostgreSQL server outbox-bench's `process` case uses, with the
// settings of graphile-worker's performance page (local queue of 500, batched completions, 24 concurrent
// jobs on a pool of 25), or its defaults with GRAPHILE_SETTINGS=defaults (100 concurrent jobs).
//
//   node bench.mjs <postgres url> [jobs = 20000] [runs = 3]
//
// Each run: a fresh schema, `jobs` jobs added in batches of 1,000 and the table analyzed, then timed from
// starting the runner until every job has run and the runner has stopped (its batched completions written).
// Prints one JSON line: the runs' jobs/s and their median, and the WAL bytes per job written while the jobs
// were added, while they were drained, and in all (`pg_current_wal_insert_lsn()` around each phase; the
// server-wide WAL, so run it on an otherwise idle server), medians too.
import { Logger, makeWorkerUtils, run } from "graphile-worker";

const [url, jobsArg, runsArg] = process.argv.slice(2);
if (!url) {
  console.error("usage: node bench.mjs <postgres url> [jobs] [runs]");
  process.exit(2);
}
const jobs = Number(jobsArg ?? 20000);
const runs = Number(runsArg ?? 3);
const defaults = process.env.GRAPHILE_SETTINGS === "defaults";
const quiet = new Logger(() => () => {});
const tuned = {
  concurrentJobs: 24,
  maxPoolSize: 25,
  localQueue: { size: 500 },
  completeJobBatchDelay: 0,
  failJobBatchDelay: 0,
};
const plain = { concurrentJobs: 100, maxPoolSize: 101 };

async function once(i) {
  const schema = `graphile_bench_${process.pid}_${i}`;
  const utils = await makeWorkerUtils({ connectionString: url, schema, logger: quiet });
  const lsn = () =>
    utils.withPgClient((c) =>
      c.query("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::text AS b").then((r) => Number(r.rows[0].b)),
    );
  try {
    await utils.migrate();
    const walStart = await lsn();
    for (let first = 0; first < jobs; first += 1000) {
      const specs = [];
      for (let n = first; n < Math.min(jobs, first + 1000); n++) {
        specs.push({ identifier: "noop", payload: { n } });
      }
      await utils.addJobs(specs);
    }
    await utils.withPgClient((c) => c.query(`ANALYZE "${schema}"._private_jobs`));
    const walDrain = await lsn();
    let ran = 0;
    let allRan;
    const done = new Promise((resolve) => (allRan = resolve));
    const start = process.hrtime.bigint();
    const runner = await run({
      connectionString: url,
      schema,
      logger: quiet,
      noHandleSignals: true,
      taskList: {
        noop: async () => {
          ran += 1;
          if (ran === jobs) allRan();
        },
      },
      preset: { worker: { ...(defaults ? plain : tuned), schema, connectionString: url } },
    });
    await done;
    await runner.stop();
    const secs = Number(process.hrtime.bigint() - start) / 1e9;
    const left = await utils.withPgClient((c) => c.query(`SELECT count(*)::int AS n FROM "${schema}"._private_jobs`));
    if (left.rows[0].n !== 0) throw new Error(`run ${i}: ${left.rows[0].n} jobs left in the table`);
    const walEnd = await lsn();
    return { perSec: jobs / secs, enqueueWal: (walDrain - walStart) / jobs, drainWal: (walEnd - walDrain) / jobs };
  } finally {
    await utils.withPgClient((c) => c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
    await utils.release();
  }
}

const results = [];
for (let i = 1; i <= runs; i++) {
  results.push(await once(i));
  console.error(`graphile-worker run ${i}/${runs}: ${results[i - 1].perSec.toFixed(0)} jobs/s`);
}
const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};
const perSec = results.map((r) => r.perSec);
console.log(
  JSON.stringify({
    peer: "graphile-worker 0.17.3",
    settings: defaults ? "defaults, concurrency 100" : "performance page: local queue 500, batched completions",
    jobs,
    run_jobs_per_sec: perSec.map((v) => Math.round(v)),
    jobs_per_sec: Math.round(median(perSec)),
    wal_bytes_per_job_enqueue: Math.round(median(results.map((r) => r.enqueueWal))),
    wal_bytes_per_job_drain: Math.round(median(results.map((r) => r.drainWal))),
    wal_bytes_per_job: Math.round(median(results.map((r) => r.enqueueWal + r.drainWal))),
  }),
);
