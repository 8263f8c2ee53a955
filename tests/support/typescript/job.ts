// A service in another language driving hubjobs jobs straight through Temporal, from
// the published contract alone (docs/contract/index.json and its JSON Schemas): the
// shape the "From another service" guide shows, run by tests/test_other_services.py.
//
//   node dist/job.js start   '{"address", "contract", "kind", "jobId", "workspaceId", "actorId", "payload", "taskQueue"}'
//   node dist/job.js cancel  '{"address", "workflowId"}'
//
// Each prints one JSON object per line: what it saw.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Connection, Client, WorkflowFailedError } from '@temporalio/client';

interface Contract {
  task_queue: string;
  kinds: Record<string, { workflow_type: string; workflow_id: string }>;
}

interface JobProgress {
  status: 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled';
  counters: { total: number; processed: number; succeeded: number; skipped: number; failed: number };
  message: string | null;
  cancel_requested: boolean;
}

const say = (what: object) => process.stdout.write(JSON.stringify(what) + '\n');
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function client(address: string): Promise<Client> {
  return new Client({ connection: await Connection.connect({ address }) });
}

async function start(args: {
  address: string;
  contract: string;
  kind: string;
  jobId: string;
  workspaceId: string;
  actorId: string;
  payload: object;
  taskQueue?: string;
}) {
  // The workflow type, its id and the task queue come from the contract's index.
  const contract: Contract = JSON.parse(readFileSync(join(args.contract, 'index.json'), 'utf8'));
  const kind = contract.kinds[args.kind];
  const workflowId = kind.workflow_id.replace('{job_id}', args.jobId);
  const temporal = await client(args.address);
  // job-input.schema.json: workspace_id and actor_id are required; job_id (from the
  // workflow id) and correlation_id (the workflow id) are left to their defaults.
  const handle = await temporal.workflow.start(kind.workflow_type, {
    taskQueue: args.taskQueue ?? contract.task_queue,
    workflowId,
    args: [{ workspace_id: args.workspaceId, actor_id: args.actorId, payload: args.payload }],
  });
  say({ started: workflowId });
  // The progress query (job-progress.schema.json) while it runs: once mid-way.
  for (;;) {
    const progress = await handle.query<JobProgress>('progress');
    const { processed, total } = progress.counters;
    if (progress.status === 'running' && processed > 0 && processed < total) {
      say({ midway: progress });
      break;
    }
    const { status } = await handle.describe();
    if (status.name !== 'RUNNING') {
      say({ closed_before_midway: status.name });
      break;
    }
    await sleep(100);
  }
  say({ result: await handle.result() });
}

async function cancel(args: { address: string; workflowId: string }) {
  const temporal = await client(args.address);
  const handle = temporal.workflow.getHandle(args.workflowId);
  await handle.signal('cancel'); // a bare signal: no argument at all
  say({ signalled: args.workflowId });
  try {
    await handle.result();
    say({ closed: 'completed' });
  } catch (err) {
    // A cancelled job's run closes as Canceled.
    say({ closed: err instanceof WorkflowFailedError ? err.cause?.name ?? 'failed' : String(err) });
  }
  say({ progress: await handle.query<JobProgress>('progress').catch(() => null) });
}

const [command, json] = process.argv.slice(2);
const args = JSON.parse(json ?? '{}');
const commands: Record<string, (args: any) => Promise<void>> = { start, cancel };
if (!commands[command]) {
  console.error(`usage: job.js start|cancel '<json>' (from ${dirname(process.argv[1])})`);
  process.exit(2);
}
await commands[command](args);
process.exit(0);
